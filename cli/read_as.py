"""Running a file read with someone else's filesystem ids, in a thread of its own: what root's CLI uses to
read a file named by a profiled process only as that process's owner could (the HTML report's sources).

setfsuid and setfsgid are per thread (glibc calls them straight, unlike setuid), and moving the fs uid
from 0 to another clears the thread's filesystem capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, ...):
the kernel then checks every directory and the file as it would for that user. The thread ends with the
borrowed ids; no other thread of the CLI ever holds them. Supplementary groups stay root's (changing them
would change every thread's), so the caller also checks the file's own mode."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
NOBODY = 65534  # the ids to read as when the owner is not known
_libc = ctypes.CDLL(None, use_errno=True)


def read_as(uid: int, gid: int, fn: Callable[[], T]) -> T:
    """fn() in a new thread with fs ids uid and gid; its result or exception is the call's. A CLI that is
    not root runs fn as itself (the kernel already checks its own rights)."""
    if os.geteuid() != 0:
        return fn()
    out: list[T] = []
    err: list[BaseException] = []

    def body() -> None:
        try:
            _libc.setfsgid(gid)
            _libc.setfsuid(uid)
            # both report the previous id, never an error: read them back
            if _libc.setfsuid(-1) != uid or _libc.setfsgid(-1) != gid:
                raise PermissionError("could not take the file owner's ids to read the file")
            out.append(fn())
        except BaseException as e:  # handed back to the calling thread
            err.append(e)

    t = threading.Thread(target=body, name="read-as", daemon=True)
    t.start()
    t.join()
    if err:
        raise err[0]
    return out[0]
