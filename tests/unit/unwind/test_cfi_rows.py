"""host/unwind/cfi_rows.c against the Python reference (cfi.iter_fdes + interp.run): the same table, row for
row and rule for rule, on the machine's libraries and on thousands of damaged copies of a real .eh_frame."""

from __future__ import annotations

import random
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from fuzz_cfi_rows import damaged

from deepctx.host.elf.reader import ElfFile
from deepctx.host.unwind import native_rows
from deepctx.host.unwind.arch import AARCH64, X86_64, arch_for_machine
from deepctx.host.unwind.cfi import CfiError
from deepctx.host.unwind.table import UnwindTable, _Builder, build_table


def test_the_library_is_built() -> None:
    """install.sh builds native/ (make -C native): without it every table is built in Python."""
    assert native_rows.library() is not None, native_rows.LIBRARY


def test_the_structs_python_reads_are_the_libraries() -> None:
    import ctypes as ct

    lib = ct.CDLL(str(native_rows.LIBRARY))
    lib.cfi_layout.argtypes = [ct.POINTER(ct.c_uint64)]
    assert native_rows.layout(lib) == native_rows.expected_layout()


def test_a_library_of_another_layout_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library left from an older cfi_rows.c (the checkout updated, native/ not built again) would read and
    write its structs at other offsets: it is refused, and the tables are built in Python."""
    monkeypatch.setattr(native_rows, "_lib", None)
    monkeypatch.setattr(native_rows, "_tried", False)
    monkeypatch.setattr(native_rows, "expected_layout", lambda: [0] * 7)
    assert native_rows.library() is None
    monkeypatch.setattr(native_rows, "_tried", False)
    monkeypatch.undo()
    assert native_rows.library() is not None


def _same(a: UnwindTable, b: UnwindTable) -> None:
    assert (a.arch, a.base, a.build_id) == (b.arch, b.base, b.build_id)
    assert a.pcs.dtype == b.pcs.dtype and np.array_equal(a.pcs, b.pcs)
    assert a.infos.dtype == b.infos.dtype and np.array_equal(a.infos, b.infos)
    assert a.rules == b.rules
    drop = {"build_seconds"}
    assert {k: v for k, v in a.stats.items() if k not in drop} == {k: v for k, v in b.stats.items() if k not in drop}


def _libraries() -> list[str]:
    """ELF files every test machine has: the C and C++ runtimes, the interpreter, and the CUDA runtime of the
    virtualenv's NVIDIA wheels when they are there (a large C++ library)."""
    import ctypes.util

    found = []
    for name in ("c", "stdc++", "m"):
        lib = ctypes.util.find_library(name)
        hit = next((p for d in ("/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64")
                    if lib and (p := Path(d) / lib).exists()), None)
        if hit:
            found.append(str(hit))
    libpython = Path(sysconfig.get_config_var("LIBDIR") or "") / (sysconfig.get_config_var("LDLIBRARY") or "")
    found.append(str(libpython) if libpython.is_file() and libpython.suffix != ".a" else sys.executable)
    try:
        import nvidia  # the virtualenv's CUDA wheels (install.sh)

        for base in nvidia.__path__:
            found += sorted(str(p) for p in Path(base).glob("*/lib/libcudart.so*"))[:1]
    except ImportError:
        pass
    return found


@pytest.mark.parametrize("path", _libraries(), ids=lambda p: Path(p).name)
def test_a_library_gives_the_same_table(path: str) -> None:
    py, c = build_table(path, native=False), build_table(path, native=True)
    assert len(c) > 1000  # a real table, not two empty ones
    _same(py, c)


def _eh_frame(path: str) -> tuple[bytes, int, int, int]:
    with ElfFile(path) as f:
        a = arch_for_machine(f.machine)
        data = f.section_data(".eh_frame")
        assert data is not None
        return bytes(data), f.sections[".eh_frame"].addr, a.fp_reg, a.ra_reg


def _build(data: bytes, addr: int, native: bool, is_eh: bool = True, skip: bool = False) -> UnwindTable | str:
    """The table of one section, or the exception the Python reference raised (the C side then must not
    give a table the reference could not)."""
    b = _Builder(X86_64, path="mutant", native=native)
    try:
        if skip:  # as .debug_frame after .eh_frame: the first half's ranges are passed over in the second
            b.add_section(0, data[: len(data) // 2], addr, is_eh, None)
            b.add_section(1, data, addr, is_eh, b.ranges() if len(b.begins) else None)
        else:
            b.add_section(0, data, addr, is_eh, None)
        return b.finish(None)
    except (CfiError, ValueError) as e:
        return type(e).__name__


def test_damaged_copies_of_a_real_eh_frame_give_the_same_rows() -> None:
    """2,000 pieces of libc's .eh_frame (512 B to 32 KiB), each damaged in up to 12 places (bytes, 4-byte words,
    LEB128 numbers past 64 bits), read as .eh_frame or as .debug_frame (after half of it, whose ranges are
    then passed over): each gives the reference's table (rows, rules and the count of skipped records), or
    both refuse it alike. These found three places where the reference itself was wrong (a CIE at a negative
    offset, an address range past 2**64, a pointer cut by the section's end)."""
    libc = next(p for p in _libraries() if Path(p).name.startswith("libc."))
    data, addr, _, _ = _eh_frame(libc)
    rng = random.Random(20261206)
    compared = with_errors = refused = 0
    for i in range(2000):
        m = damaged(rng, data)
        mode = {"is_eh": i % 5 != 3, "skip": i % 11 == 4}
        py = _build(bytes(m), addr, False, **mode)
        c = _build(bytes(m), addr, True, **mode)
        if isinstance(py, str) or isinstance(c, str):
            assert py == c, (i, py, c)
            refused += 1
            continue
        _same(py, c)
        compared += 1
        with_errors += py.stats.get("errors", 0) > 0
    assert compared > 1400 and with_errors > 700 and refused > 100, (compared, with_errors, refused)


def test_an_arm64_table_is_the_same() -> None:
    """aarch64's registers (x29 the frame pointer, x30 the return address): the same rows on a hand-made section
    that sets, saves and restores both."""
    from test_unwind_table import _section  # hand-made records

    code = bytes([0x0E, 0x10, 0x9D, 0x02, 0x9E, 0x01, 0x41, 0x0A, 0x0E, 0x20, 0x41, 0x0B, 0xDD, 0xDE, 0x42])
    data = _section([(0x1000, 0x80, code), (0x1080, 0x40, bytes([0x0D, 0x1D, 0x41, 0x0E, 0x00]))])
    out = []
    for native in (False, True):
        b = _Builder(AARCH64, path="arm64", native=native)
        b.add_section(0, data, 0x10000, True, None)
        out.append(b.finish(None))
    _same(*out)
    assert len(out[0]) >= 4
