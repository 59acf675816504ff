"""Test-side symbolization of native IPs: module basename and the ELF symbol containing the address
(.symtab or .dynsym, plus the separate debug file of a build id when one is installed)."""

from __future__ import annotations

import bisect
import functools
import os
from dataclasses import dataclass, field

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from deepctx.host import procfs
from deepctx.host.elf.reader import ElfFile


@dataclass
class _Symbols:
    starts: list[int] = field(default_factory=list)
    entries: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, name)

    def find(self, vaddr: int) -> str | None:
        i = bisect.bisect_right(self.starts, vaddr) - 1
        for j in range(i, max(i - 4, -1), -1):  # a few back: a large symbol may enclose smaller ones
            start, end, name = self.entries[j]
            if start <= vaddr < end:
                return name
        return None


@functools.lru_cache(maxsize=64)  # libc's debug file takes pyelftools seconds: once per test session
def _read_symbols(paths: tuple[str, ...]) -> _Symbols:
    found: dict[int, tuple[int, int, str]] = {}
    for path in paths:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            for sec in elf.iter_sections():
                if not isinstance(sec, SymbolTableSection):
                    continue
                for s in sec.iter_symbols():
                    if s["st_info"]["type"] == "STT_FUNC" and s["st_value"] and s["st_size"]:
                        found.setdefault(
                            s["st_value"], (s["st_value"], s["st_value"] + s["st_size"], s.name.split("@")[0])
                        )
    entries = sorted(found.values())
    return _Symbols([e[0] for e in entries], entries)


class Symbolizer:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.space = procfs.AddressSpace(procfs.read_maps(pid))
        self._syms: dict[str, _Symbols] = {}
        self._bias: dict[int, int | None] = {}
        self._names: dict[int, str] = {}

    def module(self, ip: int) -> str:
        m = self.space.find(ip)
        return os.path.basename(m.path) if m and m.path else "?"

    def name(self, ip: int) -> str:
        """Function name, or "?" (ip is looked up as ip - 1 by the caller for return addresses)."""
        if ip not in self._names:
            self._names[ip] = self._lookup(ip)
        return self._names[ip]

    def _lookup(self, ip: int) -> str:
        m = self.space.find(ip)
        if m is None or not m.file_backed:
            return "?"
        path = procfs.open_mapped_file(self.pid, m)
        if m.start not in self._bias:
            with ElfFile(path) as f:
                self._bias[m.start] = f.load_bias(m.start, m.offset)
                build_id = f.build_id()
            if m.path not in self._syms:
                paths = [m.path if os.path.exists(m.path) else path]  # a stable key for the cache
                if build_id:
                    dbg = f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug"
                    if os.path.exists(dbg):
                        paths.append(dbg)
                self._syms[m.path] = _read_symbols(tuple(paths))
        bias = self._bias[m.start]
        if bias is None:
            return "?"
        return self._syms[m.path].find(ip - bias) or "?"

    def frames(self, ips: list[int]) -> list[str]:
        """Function names, leaf first; return addresses are looked up at the call (ip - 1)."""
        return [self.name(ip if i == 0 else ip - 1) for i, ip in enumerate(ips)]
