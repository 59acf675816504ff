"""Native addresses to frames: /proc/<pid>/maps + ELF symbol tables, cached per file across processes."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from deepctx.host.demangle import demangle
from deepctx.host.elf.symbols import ElfSymbols
from deepctx.host.frames import UNWIND_LOST, Frame
from deepctx.host.procfs import AddressSpace, Mapping, open_mapped_file


class SymbolCache:
    """ELF symbol tables keyed by file identity ((dev, inode), then build id): a library mapped by ten
    processes, or the same build in two containers, is read once. Bounded, least recently used out."""

    def __init__(self, max_files: int = 512) -> None:
        self.max_files = max_files
        self._by_file: OrderedDict[tuple[str, int], ElfSymbols | None] = OrderedDict()
        self._by_build_id: dict[str, ElfSymbols] = {}
        self._lock = threading.Lock()
        self.loads = 0  # files actually parsed (tests check that sharing works)
        self.failures = 0

    def get(self, pid: int, m: Mapping) -> ElfSymbols | None:
        key = m.file_key
        with self._lock:
            if key in self._by_file:
                self._by_file.move_to_end(key)
                return self._by_file[key]
        syms: ElfSymbols | None
        try:
            path = open_mapped_file(pid, m)
            syms = ElfSymbols(path)
            self.loads += 1
        except (OSError, ValueError, Exception):  # unreadable or not ELF (ElfError), or any other surprise
            syms = None
            self.failures += 1
        with self._lock:
            if syms is not None and syms.build_id:
                known = self._by_build_id.get(syms.build_id)
                if known is not None:
                    syms = known  # same build under another path: reuse the loaded table
                else:
                    self._by_build_id[syms.build_id] = syms
            self._by_file[key] = syms
            while len(self._by_file) > self.max_files:
                _, old = self._by_file.popitem(last=False)
                if old is not None and old.build_id and old not in self._by_file.values():
                    self._by_build_id.pop(old.build_id, None)
        return syms


def module_name(m: Mapping | None) -> str:
    if m is None:
        return "[unknown]"
    if not m.path:
        return "[anon]"
    # an injected agent is mapped from a memfd: "/memfd:libdeepctx_cupti.so (deleted)"
    return os.path.basename(m.path.removesuffix(" (deleted)")).removeprefix("memfd:")


class NativeSymbolizer:
    """One per capture: frames are cached by address, since thousands of stacks share their frames."""

    def __init__(self, cache: SymbolCache) -> None:
        self.cache = cache
        self._frames: dict[tuple[int, int], Frame] = {}
        self._not_code: set[tuple[int, int]] = set()  # return addresses - 1 found outside executable memory
        self.stacks_cut = 0  # native stacks whose walk left executable memory (see symbolize_stack)

    def symbolize(self, pid: int, space: AddressSpace, addr: int) -> Frame:
        """A native frame for an exact code address (callers pass return addresses minus one)."""
        key = (pid, addr)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._frames[key] = self._symbolize(pid, space, addr)
        return frame

    def _symbolize(self, pid: int, space: AddressSpace, addr: int) -> Frame:
        m = space.find(addr)
        mod = module_name(m)
        if m is None or not m.file_backed:
            return Frame("native", f"{mod}+{addr:#x}" if m is None else f"{mod}+{addr - m.start:#x}", module=mod)
        file_offset = addr - m.start + m.offset
        syms = self.cache.get(pid, m)
        if syms is not None:
            vaddr = syms.file_offset_to_vaddr(file_offset)
            if vaddr is not None:
                hit = syms.lookup(vaddr)
                if hit is not None:
                    return Frame("native", demangle(hit[0]), module=mod)
                return Frame("native", f"{mod}+{vaddr:#x}", module=mod)
        return Frame("native", f"{mod}+{file_offset:#x}", module=mod)

    def symbolize_stack(self, pid: int, space: AddressSpace, ips_leaf_first: list[int]) -> list[Frame]:
        """Frames outermost first. Every IP but the leaf is a return address: look up ip-1, the call.
        A return address outside executable memory (the heap, no mapping at all) means the walk went
        astray: a frame-pointer walk through code built without frame pointers reads a stack slot that is
        not a return address. It and every frame outward are garbage, different at every call, so they
        make no path anyone can read and thousands of one-off branches: one UNWIND_LOST frame stands for
        them (counted in `stacks_cut`)."""
        frames = [self.symbolize(pid, space, ips_leaf_first[0])] if ips_leaf_first else []
        known, not_code = self._frames, self._not_code
        for ip in ips_leaf_first[1:]:
            key = (pid, ip - 1)
            frame = known.get(key)  # a symbolized address is code: one lookup per return address seen before
            if frame is None:
                if key in not_code or not self._in_code(space, ip - 1):
                    not_code.add(key)
                    frames.append(UNWIND_LOST)
                    self.stacks_cut += 1
                    break
                frame = self.symbolize(pid, space, ip - 1)
            frames.append(frame)
        frames.reverse()
        return frames

    def _in_code(self, space: AddressSpace, addr: int) -> bool:
        m = space.find(addr)
        return m is not None and m.executable
