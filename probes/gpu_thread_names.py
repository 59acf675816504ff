"""The names of the threads that made GPU calls, as the GPU program recorded them at each thread's first call
with a path (`gpu_comms`: pid << 32 | tid -> struct gpu_comm). They name threads gone before the profile is
built, and threads /proc listed between their clone and their pthread_setname_np.

A program shared by captures at once (continuous mode) outlives their threads, and tids are reused: a
process's entries go as its capture detaches, and its gone threads' after each window that named them. An
entry left behind would give its name to the next thread of that tid in that process, and a full map records
no name at all.
"""

from __future__ import annotations

from typing import Any

from deepctx.host import procfs
from deepctx.probes.maps import delete_keys, items

MAP = b"gpu_comms"


def _entries(bpf: Any) -> list[tuple[int, int, bytes]]:
    """(pid, tid, name) of every entry."""
    out = []
    for k, v in items(bpf[MAP]):
        key = int(getattr(k, "value", k))
        out.append((key >> 32, key & 0xFFFFFFFF, bytes(v.comm).split(b"\0", 1)[0]))
    return out


class GpuThreadNames:
    def __init__(self) -> None:
        self._gone: dict[int, set[int]] = {}  # pid -> its named threads gone at its last window's cut

    def names(self, bpf: Any, pid: int) -> dict[int, str]:
        return {tid: name.decode(errors="replace") for p, tid, name in _entries(bpf) if p == pid}

    def at_cut(self, bpf: Any, pid: int) -> None:
        """At a window's cut: the threads gone by now made all their calls before it, so their names serve the
        window being cut and no later one."""
        self._gone[pid] = {tid for p, tid, _ in _entries(bpf) if p == pid and procfs.thread_name(pid, tid) is None}

    def after_window(self, bpf: Any, pid: int) -> None:
        gone = self._gone.pop(pid, None)
        if gone:
            self._delete(bpf, pid, gone)

    def forget(self, bpf: Any, pid: int) -> None:
        """The capture of pid detaches: all its entries go."""
        self._gone.pop(pid, None)
        self._delete(bpf, pid, None)

    @staticmethod
    def _delete(bpf: Any, pid: int, tids: set[int] | None) -> None:
        """Deletes pid's entries of tids (every one of pid's when None); a key already gone is passed over."""
        if tids is None:
            tids = {tid for p, tid, _ in _entries(bpf) if p == pid}
        table = bpf[MAP]
        delete_keys(table, [table.Key(pid << 32 | tid) for tid in tids])
