"""Reading a file that a profiled process names (a code object's co_filename), as its owner would.

The name is the target's choice: it may be a FIFO (an open for reading blocks until a writer comes), a
device, or a file only root may read. So the file is opened in a thread holding the target owner's fs ids
and groups and no capabilities (daemon/access.py: the kernel checks the path as for that user), without
blocking and without making it the daemon's terminal, checked on its descriptor to be a regular file, and
read up to a cap."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from deepctx.daemon import access

MAX_SOURCE_BYTES = 4 << 20  # a source file worth parsing for names; a larger one is left unread


@dataclass(frozen=True)
class Owner:
    uid: int
    gid: int
    groups: frozenset[int]


def owner_of(pid: int) -> Owner | None:
    """The process's filesystem uid and gid and its groups (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        uids, gids = fields["Uid"].split(), fields["Gid"].split()
        return Owner(int(uids[3]), int(gids[3]), frozenset(int(g) for g in fields.get("Groups", "").split()))
    except (OSError, KeyError, IndexError, ValueError):
        return None


def read_regular(path: str, limit: int = MAX_SOURCE_BYTES) -> bytes | None:
    """path's bytes when it is a regular file of at most limit bytes; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None


def read_target_file(pid: int, path: str, limit: int = MAX_SOURCE_BYTES) -> bytes | None:
    """A file named by process pid (path: as seen from the daemon, e.g. under /proc/PID/root), read as the
    process's owner could; None when it may not, or when it is not a regular file within limit."""
    owner = owner_of(pid)
    if owner is None:
        return None
    try:
        return access.as_caller(owner, lambda: read_regular(path, limit))
    except access.AccessCheckFailed:
        return None
