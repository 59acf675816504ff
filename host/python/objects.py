"""Reading str and bytes objects out of a target's memory."""

from __future__ import annotations

from deepctx.host.procfs import ProcessMemory
from deepctx.host.python.layouts import PyLayout

MAX_STRING = 4096  # code points: names and paths are far shorter; garbage lengths are refused
MAX_BYTES = 1 << 20  # a line table this long is garbage


def read_unicode(mem: ProcessMemory, addr: int, layout: PyLayout) -> str:
    """A compact str object's text (every str a code object holds is compact)."""
    head = mem.read(addr, layout.unicode_compact_size)
    length = int.from_bytes(head[layout.unicode_length : layout.unicode_length + 8], "little", signed=True)
    state = int.from_bytes(head[layout.unicode_state : layout.unicode_state + 4], "little")
    kind, compact, ascii_ = (state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1
    if not compact or kind not in (1, 2, 4) or not 0 <= length <= MAX_STRING:
        raise MemoryError(f"not a compact str at {addr:#x}")
    if ascii_:
        return mem.read(addr + layout.unicode_ascii_size, length).decode("ascii", errors="replace")
    data = mem.read(addr + layout.unicode_compact_size, length * kind)
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
    return data.decode(codec, errors="replace")


def read_bytes(mem: ProcessMemory, addr: int, layout: PyLayout) -> bytes:
    size = int.from_bytes(mem.read(addr + layout.bytes_size, 8), "little", signed=True)
    if not 0 <= size <= MAX_BYTES:
        raise MemoryError(f"not a bytes object at {addr:#x}")
    return mem.read(addr + layout.bytes_data, size) if size else b""

