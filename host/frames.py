"""One frame of a call path, as every symbolizer produces it and the calling context tree consumes it."""

from __future__ import annotations

import re
from typing import NamedTuple

# Node kinds of the profile schema (docs/formats.md). Frames use the subset that can appear on a path.
NODE_KINDS = ("root", "thread", "python", "native", "op", "api", "kernel", "memcpy", "memset", "sync",
              "gpu_function", "gpu_line", "gpu_instruction")  # the last three: inside a kernel (PC samples)


# Python files of installed packages, the standard library, or no file at all ("<string>", "<frozen ...>")
LIBRARY_FILE = re.compile(r"/(site|dist)-packages/|/lib/python3\.\d+t?/|^<")


def is_library_file(filename: str) -> bool:
    """A Python file the user does not edit: an installed package's, the standard library's, or none."""
    return bool(LIBRARY_FILE.search(filename))


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
    resources  (registers per thread, static shared memory bytes per block), for gpu_function frames
    """

    kind: str
    name: str
    file: str | None = None
    line: int | None = None
    module: str | None = None
    tid: int | None = None
    launch: tuple[int, int, int, int, int, int, int] | None = None
    stream: int | None = None
    resources: tuple[int, int] | None = None


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


# Synthetic frames: each names one cause (docs/formats.md, "Special names"; the profile's stats count the
# samples under each, daemon/label_stats.py).
# Outermost frame of a stack deeper than its walk's depth limit (native or Python): the callers beyond are cut.
TRUNCATED = Frame("native", "[truncated]")
# Outermost frame of a native stack whose walk left executable memory: the callers beyond it are unknown.
UNWIND_LOST = Frame("native", "[unwinding lost the callers]")
# Where the Python walker stopped at a frame it could not read: the Python frames beyond it are missing.
PYTHON_UNREADABLE = Frame("native", "[Python walk stopped: unreadable frame]")
# Where a thread was running Python code (the interpreter's eval loop on its native stack) but the Python walker
# had no stack for it: it stands where the Python frames would, at the innermost eval activation.
PYTHON_MISSING = Frame("python", "[Python frames missing]")
# Innermost frame of a CPU sample taken while the thread was in deepctx's own probe at a GPU call (the uprobe's
# trap and its BPF programs): what watching cost the target (daemon/probe_samples.py).
DEEPCTX_PROBE = Frame("native", "[deepctx probe]")
# Outermost frame of a native (.eh_frame) walk that stopped before the thread's entry, by its reason.
UNWIND_STOPPED = {
    "no_table": Frame("native", "[unwinding stopped: no unwind table]"),
    "read_error": Frame("native", "[unwinding stopped: unreadable stack]"),
    "unsupported": Frame("native", "[unwinding stopped: unsupported unwind rule]"),
    "bad_frame": Frame("native", "[unwinding stopped: frame outside the stack]"),
    "no_proc": Frame("native", "[unwinding stopped: process not known to the unwinder]"),
    "other": Frame("native", "[unwinding stopped]"),
}
# Frames that stand where a walk was cut (what is above them is missing).
CUT_MARKERS = frozenset({TRUNCATED, UNWIND_LOST, PYTHON_UNREADABLE, *UNWIND_STOPPED.values()})
# A Python frame whose code object could not be read because the process had exited; one whose code
# object was freed (its address holds something else) before deepctxd read it.
PYTHON_UNKNOWN = "[unknown]"
PYTHON_FREED_CODE = "[code object freed]"
# The module of a native address no mapping held when the process's maps were read ("[unmapped]+0x7f…").
UNMAPPED = "[unmapped]"
