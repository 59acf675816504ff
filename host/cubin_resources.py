"""What each kernel of a cubin reserves per thread and per block: its registers (the .nv.info section's
EIATTR_REGCOUNT entries) and its static shared memory (the size of its .nv.shared.<function> section), read
with the project's ELF reader. The analyzer's occupancy rule needs them beside the launch's block size and
dynamic shared memory."""

from __future__ import annotations

import struct
import tempfile
from dataclasses import dataclass

from deepctx.host.elf.reader import ElfError, ElfFile

_EIFMT_SVAL = 0x04  # an entry whose value follows it (size bytes); the others hold theirs in the size field
_EIATTR_REGCOUNT = 0x2F  # value: u32 function symbol index, u32 registers


@dataclass(frozen=True)
class KernelResources:
    registers: int | None  # per thread
    static_shared: int  # bytes per block


def _nv_info_entries(data: bytes) -> list[tuple[int, bytes]]:
    out, o = [], 0
    while o + 4 <= len(data):
        fmt, attr, size = data[o], data[o + 1], struct.unpack_from("<H", data, o + 2)[0]
        o += 4
        if fmt == _EIFMT_SVAL:
            out.append((attr, data[o:o + size]))
            o += size
    return out


def read_resources(path: str) -> dict[str, KernelResources]:
    """Per function (symbol) name; {} for a file that is not a readable cubin."""
    try:
        with ElfFile(path) as elf:
            table = elf.symbol_table(".symtab")
            if table is None:
                return {}
            syms, strtab = table
            names = {i: elf.string_at(strtab, int(n)) for i, n in enumerate(syms["name"].tolist())}
            del syms, table  # a view of the mapping: the file cannot close while it lives
            regs: dict[str, int] = {}
            for attr, value in _nv_info_entries(elf.section_data(".nv.info") or b""):
                if attr == _EIATTR_REGCOUNT and len(value) >= 8:
                    index, count = struct.unpack_from("<II", value)
                    if index in names:
                        regs[names[index]] = count
            shared = {s.name.removeprefix(".nv.shared."): s.size for s in elf.section_list
                      if s.name.startswith(".nv.shared.") and not s.name.startswith(".nv.shared.reserved")}
            functions = {s.name.removeprefix(".text.") for s in elf.section_list if s.name.startswith(".text.")}
            return {fn: KernelResources(regs.get(fn), shared.get(fn, 0)) for fn in functions}
    except (ElfError, OSError, struct.error, ValueError):
        return {}


def resources(cubin: bytes) -> dict[str, KernelResources]:
    with tempfile.NamedTemporaryFile(prefix="deepctx-", suffix=".cubin") as f:  # the reader maps a file
        f.write(cubin)
        f.flush()
        return read_resources(f.name)
