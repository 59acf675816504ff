"""The few ELF facts the Python family needs from an interpreter file: symbol addresses, initial
data at a virtual address, and where a mapping put the file in a process (read through reader.py)."""

from __future__ import annotations

from deepctx.host.elf.reader import ElfFile, Segment
from deepctx.host.procfs import Mapping


class ElfImage:
    """An open ELF file; symbols are looked up by name in .dynsym, then .symtab."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._elf = ElfFile(path, allow_32bit=True)
        self.segments: list[Segment] = self._elf.load_segments()
        self._symbols: dict[str, dict[str, tuple[int, int]]] = {}

    def close(self) -> None:
        self._elf.close()

    def __enter__(self) -> ElfImage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _table(self, section: str) -> dict[str, tuple[int, int]]:
        if section not in self._symbols:
            table: dict[str, tuple[int, int]] = {}
            found = self._elf.symbol_table(section)
            if found is not None:
                raw, strtab = found
                for name_off, value, size in zip(raw["name"].tolist(), raw["value"].tolist(),
                                                 raw["size"].tolist(), strict=True):
                    if name_off and value:
                        name = self._elf.string_at(strtab, name_off)
                        if name:
                            table.setdefault(name, (value, size))
                del raw, found
            self._symbols[section] = table
        return self._symbols[section]

    def symbol(self, name: str) -> tuple[int, int] | None:
        """(virtual address, size) of a defined symbol, or None."""
        return self._table(".dynsym").get(name) or self._table(".symtab").get(name)

    def read_vaddr(self, vaddr: int, size: int) -> bytes | None:
        """Initial contents at a virtual address (None outside the file-backed part of a segment)."""
        for seg in self.segments:
            if seg.vaddr <= vaddr and vaddr + size <= seg.vaddr + seg.filesz:
                start = seg.offset + vaddr - seg.vaddr
                return self._elf.data[start:start + size]
        return None

    def section_data(self, name: str) -> bytes | None:
        """The section's contents; raises OverCap (a ValueError) over max_decompressed_bytes: the file is
        a target's, and may be a zlib bomb."""
        return self._elf.section_data(name)

    def load_bias(self, mappings: list[Mapping]) -> int | None:
        return load_bias(self.segments, mappings)


def load_bias(segments: list[Segment] | tuple[Segment, ...], mappings: list[Mapping]) -> int | None:
    """What to add to a virtual address of the file with these segments to get its address in the process,
    from the mappings of this file there."""
    for m in sorted(mappings, key=lambda m: m.offset):
        for seg in segments:
            if seg.offset <= m.offset < seg.offset + max(seg.filesz, 1):
                return m.start - m.offset - (seg.vaddr - seg.offset)
    return None
