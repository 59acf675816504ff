"""The few ELF facts the Python family needs from an interpreter file: symbol addresses, initial
data at a virtual address, and where a mapping put the file in a process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from elftools.elf.elffile import ELFFile

from deepctx.host.file_limits import section_data
from deepctx.host.procfs import Mapping


@dataclass(frozen=True)
class Segment:
    vaddr: int
    offset: int
    filesz: int
    memsz: int


class ElfImage:
    """An open ELF file; symbols are looked up by name in .dynsym, then .symtab."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: BinaryIO = open(path, "rb")  # closed by close()
        try:
            self._elf = ELFFile(self._file)
            self.segments = [
                Segment(s["p_vaddr"], s["p_offset"], s["p_filesz"], s["p_memsz"])
                for s in self._elf.iter_segments()
                if s["p_type"] == "PT_LOAD"
            ]
        except Exception:
            self._file.close()
            raise
        self._symbols: dict[str, dict[str, tuple[int, int]]] = {}

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ElfImage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _table(self, section: str) -> dict[str, tuple[int, int]]:
        if section not in self._symbols:
            table: dict[str, tuple[int, int]] = {}
            sec = self._elf.get_section_by_name(section)
            if sec is not None and hasattr(sec, "iter_symbols"):
                for sym in sec.iter_symbols():
                    if sym.name and sym["st_value"]:
                        table.setdefault(sym.name, (sym["st_value"], sym["st_size"]))
            self._symbols[section] = table
        return self._symbols[section]

    def symbol(self, name: str) -> tuple[int, int] | None:
        """(virtual address, size) of a defined symbol, or None."""
        return self._table(".dynsym").get(name) or self._table(".symtab").get(name)

    def read_vaddr(self, vaddr: int, size: int) -> bytes | None:
        """Initial contents at a virtual address (None outside the file-backed part of a segment)."""
        for seg in self.segments:
            if seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.filesz:
                self._file.seek(seg.offset + vaddr - seg.vaddr)
                return self._file.read(size)
        return None

    def section_data(self, name: str) -> bytes | None:
        """The section's contents; raises OverCap (a ValueError) over max_decompressed_bytes: the file is
        a target's, and may be a zlib bomb."""
        sec = self._elf.get_section_by_name(name)
        if sec is None or sec["sh_type"] == "SHT_NOBITS":
            return None
        return section_data(sec, f"{self.path}: section {name}")

    def load_bias(self, mappings: list[Mapping]) -> int | None:
        """What to add to a virtual address to get its address in the process, from the mappings of
        this file there."""
        for m in sorted(mappings, key=lambda m: m.offset):
            for seg in self.segments:
                if seg.offset <= m.offset < seg.offset + max(seg.filesz, 1):
                    return m.start - m.offset - (seg.vaddr - seg.offset)
        return None
