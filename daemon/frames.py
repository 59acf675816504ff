"""One frame of a call path, as every symbolizer produces it and the calling context tree consumes it."""

from __future__ import annotations

from typing import NamedTuple

# Node kinds of the profile schema (docs/formats.md). Frames use the subset that can appear on a path.
NODE_KINDS = ("root", "thread", "python", "native", "op", "api", "kernel", "memcpy", "memset", "sync")


class Frame(NamedTuple):
    """A symbolized frame. Two frames with equal fields are the same tree node among siblings.

    kind    one of NODE_KINDS
    name    function / symbol / operator / API / kernel name
    file    source file (Python frames), else None
    line    line number (Python frames), else None
    module  ELF file basename for native frames and GPU APIs, else None
    tid     thread id, for `thread` frames only
    launch  (grid x, y, z, block x, y, z, dynamic shared memory bytes), for `kernel` frames
    stream  the stream handle of GPU work (0: the default stream), for kernel/memcpy/memset/sync frames
    """

    kind: str
    name: str
    file: str | None = None
    line: int | None = None
    module: str | None = None
    tid: int | None = None
    launch: tuple[int, int, int, int, int, int, int] | None = None
    stream: int | None = None


def thread_frame(tid: int, comm: str) -> Frame:
    return Frame("thread", comm, tid=tid)


TRUNCATED = Frame("native", "[truncated]")
