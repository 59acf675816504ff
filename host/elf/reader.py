"""The one ELF reader: sections by name and index, segments, build id, machine, symbol tables as arrays,
and section data capped (host/file_limits.py). Unwind tables, symbol tables (symbols.py) and interpreter
images (image.py) are read through it.

A small reader over mmap rather than pyelftools: libraries like libtorch_cuda.so are hundreds of MB
and we touch only headers and one or two sections.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from dataclasses import dataclass

import numpy as np

from deepctx.host.file_limits import OverCap, check_size, inflate

EM_X86_64 = 62
EM_AARCH64 = 183

_PT_LOAD = 1
_PT_NOTE = 4
_PF_X = 1
_SHT_NOBITS = 8
_SHF_COMPRESSED = 0x800
_ELFCOMPRESS_ZLIB = 1
_CHDR_SIZE = {64: 24, 32: 12}  # Elf64_Chdr, Elf32_Chdr
_ET_DYN = 3
_NT_GNU_BUILD_ID = 3


class ElfError(ValueError):
    """Not an ELF file we can read (32-bit, big-endian, truncated ...)."""


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int = 0  # a symbol table's string table, by index


# Symbol table entries (Elf64_Sym, Elf32_Sym)
SYM_DTYPES = {
    64: np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                  ("size", "<u8")]),
    32: np.dtype([("name", "<u4"), ("value", "<u4"), ("size", "<u4"), ("info", "u1"), ("other", "u1"),
                  ("shndx", "<u2")]),
}


@dataclass(frozen=True)
class Segment:
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


class ElfFile:
    """A little-endian ELF file, memory-mapped; 64-bit only unless `allow_32bit` (unwind tables are built for
    64-bit code only; symbols are read from either). Use as a context manager."""

    def __init__(self, path: str, allow_32bit: bool = False) -> None:
        self.path = path
        self._allow_32bit = allow_32bit
        with open(path, "rb") as f:
            try:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError as e:  # empty file
                raise ElfError(f"{path}: empty") from e
        try:
            self._parse_headers()
        except (struct.error, IndexError) as e:
            self.close()
            raise ElfError(f"{path}: truncated ELF headers") from e
        except ElfError:
            self.close()
            raise

    def _parse_headers(self) -> None:
        m = self._map
        if m[:4] != b"\x7fELF":
            raise ElfError(f"{self.path}: not an ELF file")
        if m[5] != 1 or m[4] not in ((1, 2) if self._allow_32bit else (2,)):
            raise ElfError(f"{self.path}: only {'' if self._allow_32bit else '64-bit '}little-endian ELF is supported")
        self.elfclass = 64 if m[4] == 2 else 32
        wide = self.elfclass == 64
        (self.type, self.machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, shstrndx) = (
            struct.unpack_from("<HHIQQQIHHHHHH" if wide else "<HHIIIIIHHHHHH", m, 16)
        )
        self.segments = []
        for i in range(phnum):
            if wide:
                typ, flags, offset, vaddr, filesz, memsz = struct.unpack_from("<IIQQ8xQQ", m, phoff + i * phentsize)
            else:
                typ, offset, vaddr, filesz, memsz, flags = struct.unpack_from("<III4xIII", m, phoff + i * phentsize)
            self.segments.append(Segment(typ, flags, offset, vaddr, filesz, memsz))
        shdr = "<IIQQQQI" if wide else "<IIIIIII"
        raw = [struct.unpack_from(shdr, m, shoff + i * shentsize) for i in range(shnum)]
        names_off = raw[shstrndx][4] if 0 < shstrndx < len(raw) else 0
        self.section_list: list[Section] = []  # by index (sh_link refers to them so)
        self.sections: dict[str, Section] = {}  # by name: the first of a name
        for name_idx, typ, flags, addr, offset, size, link in raw:
            end = m.find(b"\0", names_off + name_idx)
            name = m[names_off + name_idx : end].decode(errors="replace") if names_off else ""
            sec = Section(name, typ, flags, addr, offset, size, link)
            self.section_list.append(sec)
            self.sections.setdefault(name, sec)

    @property
    def data(self) -> mmap.mmap:
        """The whole file, mapped read-only (valid until close)."""
        return self._map

    @property
    def is_shared(self) -> bool:
        return self.type == _ET_DYN

    def load_segments(self) -> list[Segment]:
        return [p for p in self.segments if p.type == _PT_LOAD]

    def symbol_table(self, name: str) -> tuple[np.ndarray, Section] | None:
        """A symbol table section (.symtab, .dynsym) as an array of entries (SYM_DTYPES; a view of the
        mapping, no copy) and its string table; None when absent or without file data."""
        s = self.sections.get(name)
        if s is None or s.type == _SHT_NOBITS or not 0 < s.link < len(self.section_list):
            return None
        dtype = SYM_DTYPES[self.elfclass]
        count = min(s.size, max(len(self._map) - s.offset, 0)) // dtype.itemsize
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=s.offset), self.section_list[s.link]

    def string_at(self, strtab: Section, offset: int) -> str:
        """The NUL-terminated name at `offset` of a string table."""
        start, end = strtab.offset + offset, strtab.offset + strtab.size
        stop = self._map.find(b"\0", start, end)
        return self._map[start:stop if stop >= 0 else end].decode(errors="replace")

    def section_data(self, name: str) -> bytes | None:
        """The section's contents (decompressed), or None if absent or without file data. Raises OverCap
        for a section over max_decompressed_bytes (checked before anything is read or inflated)."""
        s = self.sections.get(name)
        if s is None or s.type == _SHT_NOBITS:
            return None
        what = f"{self.path}: section {name}"
        declared = self.data_size(name)
        check_size(declared, what)
        data = self._map[s.offset : s.offset + s.size]
        if s.flags & _SHF_COMPRESSED:
            ch_type = struct.unpack_from("<I", data, 0)[0]
            if ch_type != _ELFCOMPRESS_ZLIB:
                return None  # zstd: not in the standard library
            try:
                return inflate(data[_CHDR_SIZE[self.elfclass]:], declared, what)
            except OverCap:
                raise
            except ValueError as e:
                raise ElfError(str(e)) from None
        return data

    def data_size(self, name: str) -> int:
        """Bytes of the section's contents once decompressed (from its header: nothing is inflated);
        0 when absent or without file data."""
        s = self.sections.get(name)
        if s is None or s.type == _SHT_NOBITS:
            return 0
        if not s.flags & _SHF_COMPRESSED:
            return s.size
        chdr = _CHDR_SIZE[self.elfclass]
        if s.size < chdr or s.offset + chdr > len(self._map):
            raise ElfError(f"{self.path}: {name}: truncated compression header")
        if self.elfclass == 32:
            return int(struct.unpack_from("<I", self._map, s.offset + 4)[0])
        return int(struct.unpack_from("<Q", self._map, s.offset + 8)[0])

    def digest(self, names: tuple[str, ...]) -> str | None:
        """A hash of what a table is built from: machine, build id, and each named section's header
        fields and stored bytes (compressed or not); None when none of them is present."""
        present = [self.sections[n] for n in names if n in self.sections]
        if not present:
            return None
        h = hashlib.blake2b(digest_size=20)
        h.update(struct.pack("<H", self.machine) + (self.build_id() or "").encode() + b"\0")
        for s in present:
            h.update(s.name.encode() + b"\0" + struct.pack("<IQQQ", s.type, s.flags, s.addr, s.size))
            if s.type != _SHT_NOBITS:
                h.update(self._map[s.offset : s.offset + s.size])
        return h.hexdigest()

    def build_id(self) -> str | None:
        """The GNU build id as hex, from the first note that carries one."""
        spans = [(s.offset, s.size) for s in self.sections.values() if s.name.startswith(".note")]
        spans += [(p.offset, p.filesz) for p in self.segments if p.type == _PT_NOTE]
        for off, size in spans:
            pos, end = off, off + size
            while pos + 12 <= end:
                namesz, descsz, ntype = struct.unpack_from("<III", self._map, pos)
                name_at = pos + 12
                desc_at = name_at + ((namesz + 3) & ~3)
                if ntype == _NT_GNU_BUILD_ID and self._map[name_at : name_at + namesz] == b"GNU\0":
                    return self._map[desc_at : desc_at + descsz].hex()
                pos = desc_at + ((descsz + 3) & ~3)
        return None

    def load_bias(self, start: int, file_offset: int, executable: bool = True) -> int | None:
        """runtime address - link-time address for a mapping of this file at `start` from `file_offset`.

        The kernel maps a segment from its page-aligned offset, so the mapping may begin up to a page
        before the segment's own offset; prefer executable segments for executable mappings."""
        page = mmap.PAGESIZE
        best: Segment | None = None
        for p in self.segments:
            if p.type != _PT_LOAD or not (
                p.offset - p.offset % page <= file_offset < p.offset + max(p.filesz, 1)
            ):
                continue
            if best is None or (executable and p.flags & _PF_X and not best.flags & _PF_X):
                best = p
        if best is None:
            return None
        return start - (best.vaddr + file_offset - best.offset)

    def close(self) -> None:
        self._map.close()

    def __enter__(self) -> ElfFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
