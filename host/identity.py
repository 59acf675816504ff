"""Acting as someone else for a moment: a throwaway thread that holds another user's filesystem ids and
groups and no capabilities, so that the kernel checks what it opens as it would for that user.

Linux credentials are per thread, and the raw system calls below (unlike glibc's wrappers, which change
every thread of the process) touch only the calling one; the thread dies with the borrowed credentials,
so no other thread ever runs with them. Used by the daemon to ask the kernel what a caller may do with a
process (daemon/access.py) and to read files a target names as its owner, and by root's CLI to read
sources for a report as the profiled process's owner.
"""

from __future__ import annotations

import ctypes as ct
import os
import platform
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")
NOBODY = 65534  # the ids to act as when the owner is not known
GROUP = "deepctx"  # its members may profile every process, as root may (the daemon's API, the fleet tables)

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


@dataclass(frozen=True)
class Ids:
    """An Identity by value: a uid, a gid and supplementary groups."""

    uid: int
    gid: int
    groups: frozenset[int] = frozenset()


class AccessCheckFailed(RuntimeError):
    """The thread could not take the other user's credentials: nothing was decided."""


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
    """This thread only: who's fs ids and groups, no capabilities at all."""
    groups = sorted(who.groups)
    arr = (ct.c_uint32 * max(len(groups), 1))(*groups)
    _syscall("setgroups", ct.c_size_t(len(groups)), arr)
    _syscall("setfsgid", ct.c_uint32(who.gid))
    _syscall("setfsuid", ct.c_uint32(who.uid))
    # setfs*id report the previous value, never an error: read them back to be sure they took.
    if _syscall("setfsuid", ct.c_uint32(0xFFFFFFFF)) != who.uid or _syscall("setfsgid", ct.c_uint32(0xFFFFFFFF)) != who.gid:
        raise AccessCheckFailed("the thread could not take the other user's filesystem ids")
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: no effective, permitted or inheritable capability
    _syscall("capset", ct.byref(header), data)


def as_identity(who: Identity, fn: Callable[[], T]) -> T:
    """fn() run in a new thread that holds who's credentials (see the module's docstring); its result or
    exception is the call's. A process that is not root runs fn as itself (its own credentials already
    bound what fn can do)."""
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

    t = threading.Thread(target=body, name="as-identity", daemon=True)
    t.start()
    t.join()
    if err:
        raise err[0]
    return out[0]


RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
_SYS_OPENAT2 = 437  # the same number on x86-64 and arm64


class _OpenHow(ct.Structure):
    _fields_ = [("flags", ct.c_uint64), ("mode", ct.c_uint64), ("resolve", ct.c_uint64)]


def openat2(dir_fd: int, path: str, flags: int, resolve: int) -> int:
    """openat2(2) (Linux 5.6+): path looked up from dir_fd under the RESOLVE_* rules."""
    how = _OpenHow(flags, 0, resolve)
    fd = int(_libc.syscall(ct.c_long(_SYS_OPENAT2), ct.c_int(dir_fd), os.fsencode(path), ct.byref(how),
                           ct.c_size_t(ct.sizeof(how))))
    if fd < 0:
        err = ct.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def read_regular(path: str, limit: int, allowed: Callable[[os.stat_result], bool] | None = None,
                 dir_fd: int | None = None, resolve: int = 0, offset: int = 0) -> bytes | None:
    """path's bytes when it is a regular file of at most limit bytes (and allowed(stat), if given); None
    for anything else. Opened without blocking (a FIFO would wait for a writer) and without taking a
    terminal; checked on the descriptor, so a file swapped after the open is not what is judged. With
    dir_fd, path is looked up from it under resolve (RESOLVE_* flags). offset: from there on (a file that
    grows, read again)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags) if dir_fd is None else openat2(dir_fd, path, flags, resolve)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit or (allowed is not None and not allowed(st)):
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            f.seek(offset)
            data = f.read(limit + 1 - offset)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if offset + len(data) <= limit else None
