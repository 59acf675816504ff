"""Reading a file that a profiled process names (a code object's co_filename), as its owner would.

The name is the target's choice: it may be a FIFO (an open for reading blocks until a writer comes), a
device, or a file only root may read. So the file is opened in a thread holding the target owner's fs ids
and groups and no capabilities (host/identity.py: the kernel checks the path as for that user), without
blocking and without making it the daemon's terminal, checked on its descriptor to be a regular file, and
read up to a cap."""

from __future__ import annotations

from deepctx.host.identity import AccessCheckFailed, Ids, as_identity, read_regular

MAX_SOURCE_BYTES = 4 << 20  # a source file worth parsing for names; a larger one is left unread


def owner_of(pid: int) -> Ids | None:
    """The process's filesystem uid and gid and its groups (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        uids, gids = fields["Uid"].split(), fields["Gid"].split()
        return Ids(int(uids[3]), int(gids[3]), frozenset(int(g) for g in fields.get("Groups", "").split()))
    except (OSError, KeyError, IndexError, ValueError):
        return None


def read_target_file(pid: int, path: str, limit: int = MAX_SOURCE_BYTES) -> bytes | None:
    """A file named by process pid (path: as seen from the daemon, e.g. under /proc/PID/root), read as the
    process's owner could; None when it may not, or when it is not a regular file within limit."""
    owner = owner_of(pid)
    if owner is None:
        return None
    try:
        return as_identity(owner, lambda: read_regular(path, limit))
    except AccessCheckFailed:
        return None
