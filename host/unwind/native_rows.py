"""The rows of a CFI section from host/unwind/cfi_rows.c (native/build/libdeepctx_cfi.so), with their states as
interp.State tuples: what cfi.iter_fdes and interp.run give FDE by FDE, without a Python object per FDE or row
(a whole table builds 5 to 7 times faster: BENCHMARKS.md, "Unwind tables' rows in C"). Where the library is not
built, or was built from another version of cfi_rows.c, the table is built in Python, and the log says so once."""

from __future__ import annotations

import ctypes as ct
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deepctx.host.unwind import interp

log = logging.getLogger(__name__)

LIBRARY = Path(__file__).resolve().parents[2] / "native" / "build" / "libdeepctx_cfi.so"


class _Rule(ct.Structure):
    _fields_ = [("kind", ct.c_int64), ("value", ct.c_int64), ("expr_off", ct.c_int64), ("expr_len", ct.c_int64)]


class _State(ct.Structure):
    _fields_ = [("cfa_reg", ct.c_int64), ("cfa_off", ct.c_int64), ("expr_off", ct.c_int64), ("expr_len", ct.c_int64),
                ("fp", _Rule), ("ra", _Rule)]


class _Out(ct.Structure):
    _fields_ = [("begins", ct.POINTER(ct.c_uint64)), ("ends", ct.POINTER(ct.c_uint64)),
                ("counts", ct.POINTER(ct.c_uint64)), ("rel", ct.POINTER(ct.c_uint32)),
                ("state", ct.POINTER(ct.c_uint32)), ("states", ct.POINTER(_State)), ("first", ct.POINTER(ct.c_uint64)),
                ("fdes", ct.c_uint64), ("rows", ct.c_uint64), ("nstates", ct.c_uint64), ("errors", ct.c_uint64),
                ("over_cap", ct.c_int64), ("cap_fdes", ct.c_uint64)]


@dataclass
class SectionRows:
    """One section's FDEs (pc ranges, rows each) and rows (offset in the FDE, state), the states as interp gives
    them (plain tuples), and the malformed records skipped."""

    begins: np.ndarray  # uint64
    ends: np.ndarray  # uint64
    counts: np.ndarray  # uint64
    rel: np.ndarray  # uint32
    states: np.ndarray  # uint32, indices into state_tuples
    state_tuples: list[tuple]
    first: np.ndarray  # uint64 per state: the first row that has it (all ones: none, a skipped FDE's)
    errors: int
    over_cap: bool


_lib: ct.CDLL | None = None
_tried = False


def library() -> ct.CDLL | None:
    """The loaded library, or None where it is not built (logged once)."""
    global _lib, _tried
    if not _tried:
        _tried = True
        try:
            lib = ct.CDLL(str(LIBRARY))
        except OSError as e:
            log.warning("unwind tables built in Python, several times slower: %s (make -C native builds it)", e)
            return None
        lib.cfi_rows.restype = ct.c_int
        lib.cfi_rows.argtypes = [ct.c_void_p, ct.c_uint64, ct.c_uint64, ct.c_int, ct.c_uint, ct.c_uint,
                                 ct.c_void_p, ct.c_void_p, ct.c_uint64, ct.c_uint64, ct.POINTER(_Out)]
        lib.cfi_free.restype = None
        lib.cfi_free.argtypes = [ct.POINTER(_Out)]
        lib.cfi_layout.restype = None
        lib.cfi_layout.argtypes = [ct.POINTER(ct.c_uint64)]
        if layout(lib) != expected_layout():  # built from another version of cfi_rows.c: its structs differ
            log.warning("unwind tables built in Python, several times slower: %s was built from another "
                        "version of cfi_rows.c (make -C native builds it again)", LIBRARY)
            return None
        _lib = lib
    return _lib


def layout(lib: ct.CDLL) -> list[int]:
    """The library's struct sizes and offsets (cfi_layout), to check against this module's copies of them."""
    got = (ct.c_uint64 * 7)()
    lib.cfi_layout(got)
    return list(got)


def expected_layout() -> list[int]:
    return [ct.sizeof(_Out), ct.sizeof(_State), ct.sizeof(_Rule), _Out.first.offset, _Out.fdes.offset,
            _Out.cap_fdes.offset, _State.ra.offset]


def _view(ptr: object, n: int, dtype: type) -> np.ndarray:
    """The C array as numpy sees it, no copy: valid until cfi_free."""
    if not n:
        return np.zeros(0, dtype)
    return np.ctypeslib.as_array(ptr, shape=(n,))


def _rule(r: _Rule, data: bytes) -> tuple[int, object]:
    if r.kind in (interp.EXPR, interp.VAL_EXPR):
        return (int(r.kind), bytes(data[r.expr_off:r.expr_off + r.expr_len]))
    return (int(r.kind), int(r.value))


@contextmanager
def section_rows(lib: ct.CDLL, data: bytes, addr: int, is_eh: bool, fp_reg: int, ra_reg: int,
                 skip: tuple[np.ndarray, np.ndarray] | None, max_rows: int) -> Iterator[SectionRows]:
    """Every FDE of the section (skipping those overlapping skip's ranges, sorted by begin), stopping past
    max_rows rows (over_cap). Its arrays are the C's, not copies (a large table's rows would be held twice):
    valid inside the with block only."""
    buf = np.frombuffer(data, np.uint8)
    sb = se = None
    n_skip = 0
    if skip is not None and len(skip[0]):
        sb = np.ascontiguousarray(skip[0], np.uint64)
        se = np.ascontiguousarray(skip[1], np.uint64)
        n_skip = len(sb)
    out = _Out()
    rc = lib.cfi_rows(buf.ctypes.data if len(buf) else None, len(buf), addr, int(is_eh), fp_reg, ra_reg,
                      sb.ctypes.data if sb is not None else None, se.ctypes.data if se is not None else None,
                      n_skip, max_rows, ct.byref(out))
    if rc != 0:
        raise MemoryError("the CFI rows did not fit in memory")
    try:
        n, rows = int(out.fdes), int(out.rows)
        states = []
        for i in range(int(out.nstates)):
            s = out.states[i]
            expr = bytes(data[s.expr_off:s.expr_off + s.expr_len]) if s.expr_len >= 0 else None
            states.append((int(s.cfa_reg), int(s.cfa_off), expr, _rule(s.fp, data), _rule(s.ra, data)))
        yield SectionRows(_view(out.begins, n, np.uint64), _view(out.ends, n, np.uint64),
                          _view(out.counts, n, np.uint64), _view(out.rel, rows, np.uint32),
                          _view(out.state, rows, np.uint32), states, _view(out.first, len(states), np.uint64),
                          int(out.errors), bool(out.over_cap))
    finally:
        lib.cfi_free(ct.byref(out))
