"""Where libc's functions are, as uprobes name them (the file and each function's offset in it), for the
benches and tests that probe libc in a process of their own."""

from __future__ import annotations

import ctypes as ct
import ctypes.util
import os

from elftools.elf.elffile import ELFFile

from deepctx.probes.usdt import vaddr_to_offset


class _DlInfo(ct.Structure):
    _fields_ = [("fname", ct.c_char_p), ("fbase", ct.c_void_p), ("sname", ct.c_char_p), ("saddr", ct.c_void_p)]


def libc_path() -> str:
    """The libc file this process has loaded."""
    libc = ct.CDLL(ctypes.util.find_library("c"))
    info = _DlInfo()
    dladdr = ct.CDLL(None).dladdr
    dladdr.argtypes = [ct.c_void_p, ct.POINTER(_DlInfo)]
    assert dladdr(ct.cast(libc.labs, ct.c_void_p), ct.byref(info)), "dladdr found no libc"
    return os.path.realpath(info.fname.decode())


def function_offsets(path: str, names: tuple[str, ...] | None = None) -> dict[str, int]:
    """File offsets of the named functions (names None: every function) of an ELF file's dynamic symbols."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        segments = [(s["p_offset"], s["p_vaddr"], s["p_filesz"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        out = {}
        for sym in elf.get_section_by_name(".dynsym").iter_symbols():
            if sym["st_info"]["type"] != "STT_FUNC" or not sym["st_value"] or (names and sym.name not in names):
                continue
            off = vaddr_to_offset(segments, sym["st_value"])
            if off is not None:
                out[sym.name] = off
    return out
