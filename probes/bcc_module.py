"""bcc modules made without the host-side "rw engine", so that LLVM's state goes once a program is built.

bcc's C API (`bpf_module_create_c_from_string`, what `bcc.BPF(text=...)` calls) makes every module with
its rw engine on: for each map it JIT-compiles, for the host, functions that print and parse keys and
values as text, and it keeps the module's LLVM context and both execution engines for the module's life.
Those functions are `Table.key_sprintf` and the like: bcc's C++ aborts the process if one is called on a
module without them, and deepctx calls none. deepctx never prints or parses a map entry as text (the Python side uses ctypes types from each map's
description). A module built without the rw engine copies its sections and functions out and frees
LLVM's state as soon as it is built (bcc's `BPFModule::finalize`). Measured on the development VM: about
10 MB of deepctxd's anonymous memory per loaded program (BENCHMARKS.md).

The C API has no switch for it, but libbcc exports its C++ class: this module calls `ebpf::BPFModule`'s
constructor with `rw_engine_enabled = false` and its `load_string`, as the C API does with `true`, through
ctypes. Their mangled names carry the C++ string ABI they take; where libbcc lacks them (another ABI, a
release that renamed them), `lean_modules()` leaves bcc as it is and says so once in the log.
"""

from __future__ import annotations

import ctypes as ct
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("deepctx.programs")

_CTOR = "_ZN4ebpf9BPFModuleC1EjPNS_12TableStorageEbRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEbPKc"
_LOAD = "_ZN4ebpf9BPFModule11load_stringERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEPPKci"
# Room for the object: sizeof(ebpf::BPFModule) is about 0.5 KiB in the releases read (0.24 to 0.31), and
# the header that would give it is not installed with the library. malloc'd, as operator new would: bcc's
# bpf_module_destroy deletes it.
_OBJECT_BYTES = 1 << 14


class _StdString(ct.Structure):
    """libstdc++'s std::string under the C++11 ABI (`__cxx11` in the names above): data pointer, length,
    then a 16-byte local buffer (or the capacity). Passed by const reference: only read by the callee."""

    _fields_ = [("data", ct.c_void_p), ("size", ct.c_size_t), ("local", ct.c_char * 16)]


def _std_string(text: bytes, keep: list[Any]) -> _StdString:
    s = _StdString()
    if text:
        buf = ct.create_string_buffer(text)
        keep.append(buf)
        s.data, s.size = ct.addressof(buf), len(text)
    else:
        s.data, s.size = ct.addressof(s) + _StdString.local.offset, 0
    keep.append(s)
    return s


class _Lean:
    """libbcc's constructor and load_string, bound once."""

    def __init__(self, lib: Any) -> None:
        self.ctor = getattr(lib, _CTOR)  # AttributeError where libbcc does not export it
        self.ctor.restype = None
        self.ctor.argtypes = [ct.c_void_p, ct.c_uint, ct.c_void_p, ct.c_bool, ct.c_void_p, ct.c_bool, ct.c_char_p]
        self.load = getattr(lib, _LOAD)
        self.load.restype = ct.c_int
        self.load.argtypes = [ct.c_void_p, ct.c_void_p, ct.c_void_p, ct.c_int]
        self.destroy = lib.bpf_module_destroy
        self.made = 0  # modules made without the rw engine (tests read it)
        libc = ct.CDLL(None)
        self.malloc = libc.malloc
        self.malloc.restype = ct.c_void_p
        self.malloc.argtypes = [ct.c_size_t]

    def create(self, text: bytes, flags: int, cflags: Any, ncflags: int, allow_rlimit: bool,
               device: bytes | None) -> int | None:
        """What bpf_module_create_c_from_string does, with the rw engine off: the module, or None (bcc has
        printed why it did not compile)."""
        keep: list[Any] = []
        obj = self.malloc(_OBJECT_BYTES)
        if not obj:
            raise MemoryError("no memory for a bcc module")
        ct.memset(obj, 0, _OBJECT_BYTES)
        self.ctor(obj, flags, None, False, ct.addressof(_std_string(b"", keep)), allow_rlimit, device)
        cflags_p = ct.cast(cflags, ct.c_void_p) if ncflags else None
        if self.load(obj, ct.addressof(_std_string(text, keep)), cflags_p, ncflags) != 0:
            self.destroy(obj)
            return None
        self.made += 1
        return obj


_lean: _Lean | None = None
_checked = False


def _bound(lib: Any) -> _Lean | None:
    global _lean, _checked
    if not _checked:
        _checked = True
        try:
            _lean = _Lean(lib)
        except AttributeError as e:
            log.info("bcc modules keep their rw engine (about 10 MB each): libbcc does not export %s", e)
    return _lean


@contextmanager
def lean_modules() -> Iterator[bool]:
    """Inside it (under the compile lock), `bcc.BPF(text=...)` makes its module without the rw engine.
    Yields whether it does."""
    from bcc import libbcc

    lean = _bound(libbcc.lib)
    if lean is None:
        yield False
        return
    stock = libbcc.lib.bpf_module_create_c_from_string
    libbcc.lib.bpf_module_create_c_from_string = lean.create
    try:
        yield True
    finally:
        libbcc.lib.bpf_module_create_c_from_string = stock
