"""One frame of a call path, as every symbolizer produces it and the calling context tree consumes it."""

from __future__ import annotations

import re
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


# What a thread does, from its name: runtimes name their threads (PyTorch's autograd device threads
# "pt_autograd_<device>"); the main thread is the one whose id is the process id.
_ROLES = ((re.compile(r"^pt_autograd_(\d+)$"), "autograd device {0}"),
          (re.compile(r"^pt_autograd_cpu"), "autograd cpu"),
          (re.compile(r"^(tf_|xla)"), "xla executor"),
          (re.compile(r"^pt_thread_pool"), "torch thread pool"),
          (re.compile(r"^cuda-EvtHandlr$"), "cuda event handler"),
          (re.compile(r"^pt_nccl|^ncclProxy|^NCCL"), "nccl"))


def thread_role(pid: int, tid: int, comm: str) -> str | None:
    if tid == pid:
        return "MainThread"
    for rx, role in _ROLES:
        m = rx.search(comm)
        if m:
            return role.format(*m.groups())
    return None


def thread_frame(tid: int, comm: str, pid: int | None = None, python_name: str | None = None) -> Frame:
    """A thread node: its OS name, then its Python name (threading's, host/python/thread_names.py) and its role
    where they say more ('python3 (work_0)', 'python3 (coordinator, MainThread)', 'python3 (MainThread)')."""
    role = thread_role(pid, tid, comm) if pid is not None else None
    said = [n for n in dict.fromkeys([python_name, role]) if n and n != comm]
    return Frame("thread", f"{comm} ({', '.join(said)})" if said else comm, tid=tid)


TRUNCATED = Frame("native", "[truncated]")
# Outermost frame of a native stack whose walk left executable memory: the callers beyond it are unknown.
UNWIND_LOST = Frame("native", "[unwinding lost the callers]")
