"""Code objects -> names, files and lines, read from the target's memory while it runs and cached
by (address, tag): the tag the BPF walker computed from co_firstlineno and co_name tells a
freed-and-reused address from the object it was."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from deepctx.host.compiled_sources import CompiledSources
from deepctx.host.procfs import ProcessMemory
from deepctx.host.python.discovery import Interpreter
from deepctx.host.python.linetable import Range, addr_to_line, line_ranges
from deepctx.host.python.objects import read_bytes, read_unicode
from deepctx.host.python.qualname import qualnames
from deepctx.host.target_files import read_target_file
from deepctx.host.torch_compile import is_wrapper_file

CODE_UNIT = 2  # bytes per instruction code unit (_Py_CODEUNIT)


def code_tag(firstlineno: int, name_ptr: int) -> int:
    """Same as py_code_tag() in probes/python_stack.h."""
    m = 0xFFFFFFFF
    return ((firstlineno * 0x9E3779B1) & m) ^ ((name_ptr >> 4) & m) ^ ((name_ptr >> 36) & m)


@dataclass
class CodeInfo:
    name: str
    qualname: str
    filename: str
    firstlineno: int
    firsttraceable: int | None  # instruction index; frames before it are incomplete (3.11+)
    ranges: list[Range] = field(repr=False)

    def line(self, lasti: int) -> int | None:
        return addr_to_line(self.ranges, self.firstlineno, lasti * CODE_UNIT)


class CodeReader:
    """Reads code objects of one process; remembers failures too so garbage is read once."""

    def __init__(self, mem: ProcessMemory, interp: Interpreter) -> None:
        self.mem = mem
        self.interp = interp
        self._cache: dict[tuple[int, int], CodeInfo | None] = {}
        # why a code object could not be read: "exited" (the process was gone) or "freed" (the address no
        # longer holds that code object, or no longer holds memory, while the process lives)
        self.failures: dict[tuple[int, int], str] = {}
        self._failed_at: dict[tuple[int, int], float] = {}  # time.monotonic() of each failure's decision
        self._sources: dict[str, dict[tuple[str, int], str]] = {}
        # stacks.symbolize_stack's frames by raw frame (code, tag, lasti, flags): stacks share most frames
        self.symbolized: dict[tuple[int, int, int, int], Any] = {}
        # torch.compile's wrapper modules met in code objects, read while the process runs
        self.compiled = CompiledSources(interp.pid)

    def cached(self, addr: int, tag: int) -> bool:
        return (addr, tag) in self._cache

    def get(self, addr: int, tag: int) -> CodeInfo | None:
        key = (addr, tag)
        if key not in self._cache:
            try:
                self._cache[key] = self._read(addr, tag)
            except MemoryError:
                self._cache[key] = None
            if self._cache[key] is None:
                self.failures[key] = "freed" if self.alive() else "exited"
                self._failed_at[key] = time.monotonic()
        return self._cache[key]

    def exited(self, seen_at: float, grace_s: float) -> int:
        """The process was seen gone at seen_at: code objects found freed in the grace_s before were freed by its
        exit (the interpreter's finalization frees them while it still runs), not by the program: "exited".
        Returns how many changed."""
        since = seen_at - grace_s
        late = [k for k, why in self.failures.items() if why == "freed" and self._failed_at[k] >= since]
        for k in late:
            self.failures[k] = "exited"
        if late:
            self.symbolized.clear()  # frames symbolized with the old reason
        return len(late)

    def failure(self, addr: int, tag: int) -> str | None:
        """Why get() found no code object here ("exited" or "freed"), None if it did (or was not asked)."""
        return self.failures.get((addr, tag))

    def alive(self) -> bool:
        """Whether the process's memory can still be read: _PyRuntime is mapped for as long as it lives."""
        return len(self.mem.read_up_to(self.interp.runtime, 8)) == 8

    def _read(self, addr: int, tag: int) -> CodeInfo | None:
        lay = self.interp.layout
        if self.mem.read_u64(addr + lay.object_type) != self.interp.code_type:
            return None
        firstlineno = int.from_bytes(self.mem.read(addr + lay.code_firstlineno, 4), "little", signed=True)
        name_ptr = self.mem.read_u64(addr + lay.code_name)
        if code_tag(firstlineno & 0xFFFFFFFF, name_ptr) != tag:
            return None  # the object at this address is no longer the one sampled
        name = read_unicode(self.mem, name_ptr, lay)
        filename = read_unicode(self.mem, self.mem.read_u64(addr + lay.code_filename), lay)
        if lay.code_qualname is not None:
            qualname = read_unicode(self.mem, self.mem.read_u64(addr + lay.code_qualname), lay)
        else:
            qualname = self._source_qualname(filename, name, firstlineno)
        table = read_bytes(self.mem, self.mem.read_u64(addr + lay.code_linetable), lay)
        firsttraceable = None
        if lay.code_firsttraceable is not None:
            firsttraceable = int.from_bytes(self.mem.read(addr + lay.code_firsttraceable, 4), "little", signed=True)
        ranges = line_ranges(lay.linetable_format, table, firstlineno)
        if is_wrapper_file(filename):
            self.compiled.see(filename)
        return CodeInfo(name, qualname, filename, firstlineno, firsttraceable, ranges)

    def _source_qualname(self, filename: str, name: str, firstlineno: int) -> str:
        """3.10: the qualified name from the source file, as the target sees it; else co_name."""
        if name == "<module>" or not filename.endswith(".py"):
            return name
        if filename not in self._sources:
            # the target names the file: read as its owner could, only a regular file, capped
            data = read_target_file(self.interp.pid, filename)
            try:
                self._sources[filename] = qualnames(data.decode("utf-8", errors="replace")) if data else {}
            except (SyntaxError, ValueError, RecursionError):
                self._sources[filename] = {}
        return self._sources[filename].get((name, firstlineno), name)
