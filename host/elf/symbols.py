"""ELF symbol tables, read at native speed: the symbol table is loaded with numpy, not symbol by symbol.

PyTorch's libtorch_cuda.so has hundreds of thousands of symbols, most only in .symtab; reading them one
by one in Python would take minutes, numpy takes milliseconds.
"""

from __future__ import annotations

import mmap
import sys

import numpy as np

from deepctx.host.elf.reader import ElfFile, Segment

STT_FUNC = 2
STT_GNU_IFUNC = 10
SHN_UNDEF = 0


class ElfSymbols:
    """Function symbols of one ELF file (.symtab and .dynsym), sorted by address."""

    def __init__(self, path: str) -> None:
        self.path = path
        # Kept mapped: string tables are read lazily, and clean file pages cost no private memory.
        self._elf = ElfFile(path, allow_32bit=True)
        self._data = self._elf.data
        self.build_id = self._elf.build_id()
        self.segments: list[Segment] = self._elf.load_segments()
        self.is_shared = self._elf.is_shared
        addrs, sizes, names = [], [], []
        self._strtabs: list[tuple[int, int]] = []  # (file offset, size)
        for sec_name in (".symtab", ".dynsym"):
            table = self._elf.symbol_table(sec_name)
            if table is None:
                continue
            raw, strtab = table
            stype = raw["info"] & 0xF
            keep = ((stype == STT_FUNC) | (stype == STT_GNU_IFUNC)) & (raw["shndx"] != SHN_UNDEF) & (raw["value"] != 0)
            raw = raw[keep]
            self._strtabs.append((strtab.offset, strtab.size))
            table_idx = len(self._strtabs) - 1
            addrs.append(raw["value"].astype(np.uint64))
            sizes.append(raw["size"].astype(np.uint64))
            names.append(raw["name"].astype(np.int64) | (np.int64(table_idx) << 40))
        self._base = 0  # addrs are relative to it
        self._name_shift = 40  # names: offset in its string table | the table's index << _name_shift
        a = np.concatenate(addrs) if addrs else np.zeros(0, np.uint64)
        if len(a):  # tables whose symbols are all undefined or data leave none
            s = np.concatenate(sizes)
            n = np.concatenate(names)
            # Sorted by address; for aliases at one address, the sized symbol first (.symtab before .dynsym).
            order = np.lexsort((-s.astype(np.int64), a))
            self.addrs, self.sizes, self.names = self._compact(a[order], s[order], n[order])
        else:
            self.addrs = np.zeros(0, np.uint32)
            self.sizes = np.zeros(0, np.uint32)
            self.names = np.zeros(0, np.uint32)
        self._release()

    def _compact(self, a: np.ndarray, s: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """12 bytes a symbol instead of 24 where they fit (they do for any library under 4 GiB of code, with
        string tables under 2 GiB): addresses as 32-bit offsets from the lowest, sizes in 32 bits, the name
        offset in 31 bits with the string table's index above it. libtorch_cuda.so's symbols are most of
        what a PyTorch target costs the host cache."""
        lo = int(a[0])
        self._base, self._name_shift = 0, 40
        if int(a[-1]) - lo < 1 << 32:
            self._base = lo
            a = (a - np.uint64(lo)).astype(np.uint32)
        if int(s.max()) < 1 << 32:
            s = s.astype(np.uint32)
        offsets, tables = n & ((1 << 40) - 1), n >> 40
        if len(self._strtabs) <= 2 and int(offsets.max()) < 1 << 31:
            self._name_shift = 31
            n = (offsets | (tables << 31)).astype(np.uint32)
        return a, s, n

    def _packed(self, name_offset: int, table_idx: int) -> np.integer:
        return self.names.dtype.type(name_offset | (table_idx << self._name_shift))

    def __len__(self) -> int:
        return len(self.addrs)

    @property
    def memory(self) -> int:
        """Bytes this table takes in the daemon: its arrays and small lists (the file's mapping is clean
        page cache, dropped from the resident set once indexed, so not counted)."""
        small = sys.getsizeof(self.segments) + sys.getsizeof(self._strtabs) + sys.getsizeof(self.path)
        small += sum(sys.getsizeof(seg) for seg in self.segments)
        return int(self.addrs.nbytes + self.sizes.nbytes + self.names.nbytes) + small

    def file_offset_to_vaddr(self, file_offset: int) -> int | None:
        for seg in self.segments:
            if seg.offset <= file_offset < seg.offset + max(seg.filesz, 1):
                return file_offset - seg.offset + seg.vaddr
        return None

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(symbol name, offset into it) of the function containing vaddr, or None."""
        rel = vaddr - self._base
        if rel < 0 or not len(self.addrs):
            return None
        if rel > np.iinfo(self.addrs.dtype).max:
            i = len(self.addrs) - 1
        else:
            i = int(np.searchsorted(self.addrs, self.addrs.dtype.type(rel), side="right")) - 1
        # Walk back over zero-sized or shorter aliases that do not cover vaddr.
        for j in range(i, max(i - 8, -1), -1):
            start = self._base + int(self.addrs[j])
            size = int(self.sizes[j])
            if start <= vaddr and (vaddr < start + size or (size == 0 and j == i)):
                return self._name(int(self.names[j])), vaddr - start
        return None

    def addresses_of(self, names: set[str]) -> dict[str, int]:
        """Virtual addresses of the named functions: found through the string tables, so no symbol name
        is decoded (fast on libraries with hundreds of thousands of symbols)."""
        out: dict[str, int] = {}
        data = self._data
        for table_idx, (base, size) in enumerate(self._strtabs):
            for name in names - out.keys():
                # Linkers share string tails ("cudaLaunchKernel" may be the end of "__cudaLaunchKernel"),
                # so every occurrence is a candidate, not only those after a NUL.
                needle = name.encode() + b"\0"
                at = data.find(needle, base, base + size)  # in the mapping: no copy of the table
                while at >= 0:
                    hits = np.nonzero(self.names == self._packed(at - base, table_idx))[0]
                    if len(hits):
                        out[name] = self._base + int(self.addrs[hits[0]])
                        break
                    at = data.find(needle, at + 1, base + size)
        self._release()
        return out

    def addresses_with_prefix(self, prefix: str, limit: int = 64) -> dict[str, int]:
        """Functions whose name starts with prefix (found through the string tables, like addresses_of)."""
        out: dict[str, int] = {}
        needle = b"\0" + prefix.encode()
        data = self._data
        for table_idx, (base, size) in enumerate(self._strtabs):
            at = data.find(needle, base, base + size)
            while at >= 0 and len(out) < limit:
                start = at + 1
                end = data.find(b"\0", start, base + size)
                end = end if end >= 0 else base + size
                hits = np.nonzero(self.names == self._packed(start - base, table_idx))[0]
                if len(hits):
                    out.setdefault(data[start:end].decode(errors="replace"), self._base + int(self.addrs[hits[0]]))
                at = data.find(needle, end, base + size)
        self._release()
        return out

    def close(self) -> None:
        """Unmaps the file now rather than when the garbage collector gets to it. No lookup by name after
        this."""
        self._elf.close()

    def _release(self) -> None:
        """Drops the file's pages from this process's resident set (they stay in the page cache): a
        scan of libtorch's symbol and string tables would otherwise leave ~100 MB counted in deepctxd's
        RSS. Names looked up later fault their pages in again."""
        if hasattr(self._data, "madvise"):
            self._data.madvise(mmap.MADV_DONTNEED)

    def _name(self, packed: int) -> str:
        base, size = self._strtabs[packed >> self._name_shift]
        off = base + (packed & ((1 << self._name_shift) - 1))
        end = self._data.find(b"\0", off, base + size)
        return self._data[off:end if end >= 0 else base + size].decode(errors="replace")
