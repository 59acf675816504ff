"""Asking the kernel, as the caller, what the caller may do with a process.

The daemon is root acting for a user: it may do for a caller only what the kernel would let that caller
do. Rather than re-derive the kernel's ptrace rules (uids, gids, dumpability, capabilities, every thread's
credentials, Yama, LSMs, user namespaces), deepctxd asks the kernel itself: a fresh thread of the daemon
takes the caller's filesystem ids and groups and drops every capability, then opens the /proc files whose
open runs the check in question, and exits. Linux credentials are per thread, and the raw system calls
below (unlike glibc's wrappers, which change every thread) touch only the calling one; the thread dies
with the borrowed credentials, so no other thread of the daemon ever runs with them.

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

import ctypes as ct
import os
import platform
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")

# Per-architecture numbers of the system calls used raw (per-thread credentials).
_SYSCALLS = {
    "x86_64": {"setgroups": 116, "setfsuid": 122, "setfsgid": 123, "capset": 126},
    "aarch64": {"setgroups": 159, "setfsuid": 151, "setfsgid": 152, "capset": 91},
}
_CAP_VERSION_3 = 0x20080522
_libc = ct.CDLL(None, use_errno=True)
_libc.syscall.restype = ct.c_long


class Identity(Protocol):
    uid: int
    gid: int
    groups: frozenset[int]


class AccessCheckFailed(RuntimeError):
    """The daemon could not take the caller's credentials in its checking thread: nothing was decided."""


class _CapHeader(ct.Structure):
    _fields_ = [("version", ct.c_uint32), ("pid", ct.c_int)]


class _CapData(ct.Structure):
    _fields_ = [("effective", ct.c_uint32), ("permitted", ct.c_uint32), ("inheritable", ct.c_uint32)]


def _syscall(name: str, *args: object) -> int:
    nr = _SYSCALLS[platform.machine()][name]
    r = int(_libc.syscall(ct.c_long(nr), *args))
    if r == -1 and name not in ("setfsuid", "setfsgid"):
        err = ct.get_errno()
        raise AccessCheckFailed(f"{name}: {os.strerror(err)}")
    return r


def _become(who: Identity) -> None:
    """This thread only: the caller's fs ids and groups, no capabilities at all."""
    groups = sorted(who.groups)
    arr = (ct.c_uint32 * max(len(groups), 1))(*groups)
    _syscall("setgroups", ct.c_size_t(len(groups)), arr)
    _syscall("setfsgid", ct.c_uint32(who.gid))
    _syscall("setfsuid", ct.c_uint32(who.uid))
    # setfs*id report the previous value, never an error: read them back to be sure they took.
    if _syscall("setfsuid", ct.c_uint32(0xFFFFFFFF)) != who.uid or _syscall("setfsgid", ct.c_uint32(0xFFFFFFFF)) != who.gid:
        raise AccessCheckFailed("the checking thread could not take the caller's filesystem ids")
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: no effective, permitted or inheritable capability
    _syscall("capset", ct.byref(header), data)


def as_caller(who: Identity, fn: Callable[[], T]) -> T:
    """fn() run in a new thread that holds the caller's credentials (see the module's docstring); its
    result or exception is the call's. A daemon that is not root runs fn as itself (its own credentials
    already bound what it can do)."""
    if os.geteuid() != 0:
        return fn()
    out: list[T] = []
    err: list[BaseException] = []

    def body() -> None:
        try:
            _become(who)
            out.append(fn())
        except BaseException as e:  # handed back to the caller's thread
            err.append(e)

    t = threading.Thread(target=body, name="access-check", daemon=True)
    t.start()
    t.join()
    if err:
        raise err[0]
    return out[0]


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
