"""Asking the kernel, as the caller, what the caller may do with a process.

The daemon is root acting for a user: it may do for a caller only what the kernel would let that caller
do. Rather than re-derive the kernel's ptrace rules (uids, gids, dumpability, capabilities, every thread's
credentials, Yama, LSMs, user namespaces), deepctxd asks the kernel itself: a fresh thread of the daemon
takes the caller's filesystem ids and groups and drops every capability (host/identity.py), then opens
the /proc files whose open runs the check in question, and exits with the borrowed credentials.

- Memory (profiling reads the target's memory: Python frames, stacks; injection writes it):
  /proc/PID/task/TID/mem for every thread, which the kernel opens only under
  PTRACE_MODE_ATTACH_FSCREDS against that thread's credentials.
- Visibility (listing): /proc/PID as the caller sees it (hidepid) and /proc/PID/maps, opened under
  PTRACE_MODE_READ_FSCREDS.

The thread is not a descendant of the target, so under Yama's ptrace_scope 1 the kernel answers as it
would for a debugger the caller started separately: refused. That is stricter than a caller's own
`gdb -p` of its child, never looser.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from deepctx.host.identity import AccessCheckFailed, Identity, as_identity

__all__ = ["AccessCheckFailed", "Identity", "Visibility", "as_caller", "memory_refusal", "visibility"]

as_caller = as_identity  # the daemon's name for it: what follows runs as the RPC's caller


def _open_probe(path: str) -> int:
    """0 when path opens, else the errno (ENOENT: gone)."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        return 0
    except OSError as e:
        return e.errno or 1


def memory_refusal(who: Identity, pid: int) -> str | None:
    """Why the caller may not read pid's memory (None: every thread of it may be read). Checked per
    thread: a thread may hold other credentials than the leader."""

    def check() -> str | None:
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        except FileNotFoundError:
            return f"process {pid} does not exist"
        except PermissionError:
            return f"process {pid} is not visible to the caller"
        for tid in tids:
            errno = _open_probe(f"/proc/{pid}/task/{tid}/mem")
            if errno in (0, 2, 3):  # ENOENT, ESRCH: the thread ended meanwhile
                continue
            return (f"thread {tid} of process {pid}" if tid != pid else f"process {pid}") + \
                f" may not be read by the caller ({os.strerror(errno)})"
        return None

    return as_caller(who, check)


@dataclass(frozen=True)
class Visibility:
    visible: bool  # /proc/PID exists for the caller (hidepid hides it)
    maps: bool  # the caller may read its maps (what deepctx derives from maps or memory may be shown)


def visibility(who: Identity, pids: Iterable[int]) -> dict[int, Visibility]:
    """What /proc would show the caller of each pid."""
    wanted = list(pids)

    def check() -> dict[int, Visibility]:
        out = {}
        for pid in wanted:
            try:
                os.stat(f"/proc/{pid}")
            except OSError:
                out[pid] = Visibility(False, False)
                continue
            out[pid] = Visibility(True, _open_probe(f"/proc/{pid}/maps") == 0)
        return out

    return as_caller(who, check)
