"""Reading a file that a profiled process names (a code object's co_filename), as its owner would.

The name is the target's choice: it may be a FIFO (an open for reading blocks until a writer comes), a
device, or a file only root may read. So the file is opened in a thread holding the target owner's fs ids
and groups and no capabilities (host/identity.py: the kernel checks the path as for that user), without
blocking and without making it the daemon's terminal, checked on its descriptor to be a regular file, and
read up to a cap."""

from __future__ import annotations

import os

from deepctx.host.identity import (
    RESOLVE_IN_ROOT,
    RESOLVE_NO_MAGICLINKS,
    AccessCheckFailed,
    Ids,
    as_identity,
    openat2,
    read_regular,
)

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


def read_target_file(pid: int, filename: str, limit: int = MAX_SOURCE_BYTES) -> bytes | None:
    """A file process pid names, as the process sees it (absolute: from its root; relative: from its
    working directory), read as its owner could; None when it may not, or when it is not a regular file
    within limit. The daemon opens only the process's root or working directory (the kernel's own link,
    which a capability-less thread may not follow into a process that holds capabilities, root's ones
    included); the name is then looked up from there by the owner's thread, kept inside that root."""
    owner = owner_of(pid)
    if owner is None:
        return None
    absolute = os.path.isabs(filename)
    try:
        base = os.open(f"/proc/{pid}/{'root' if absolute else 'cwd'}", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    resolve = RESOLVE_NO_MAGICLINKS | (RESOLVE_IN_ROOT if absolute else 0)
    try:
        return as_identity(owner, lambda: read_regular(filename.lstrip("/") or ".", limit, dir_fd=base,
                                                      resolve=resolve))
    except AccessCheckFailed:
        return None
    finally:
        os.close(base)



class TargetRoot:
    """A process's root directory, held open (a descriptor of the directory itself, not of /proc's link): its
    files are read as its owner could, as read_target_file does, also after the process exited (a profile built
    at the exit still reads what the process wrote last). Absolute names only."""

    def __init__(self, pid: int) -> None:
        self.owner = owner_of(pid)
        self.fd: int | None = None
        if self.owner is not None:
            try:
                self.fd = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                self.fd = None

    def read(self, filename: str, limit: int = MAX_SOURCE_BYTES, offset: int = 0) -> bytes | None:
        """The file's bytes from offset on (None where the owner may not read it or it outgrew limit)."""
        if self.fd is None or self.owner is None or not os.path.isabs(filename):
            return None
        base = self.fd
        try:
            return as_identity(self.owner, lambda: read_regular(filename.lstrip("/") or ".", limit, dir_fd=base,
                                                                resolve=RESOLVE_NO_MAGICLINKS | RESOLVE_IN_ROOT,
                                                                offset=offset))
        except AccessCheckFailed:
            return None

    def listdir(self, dirname: str, limit: int = 256) -> list[str] | None:
        """The names in a directory (at most limit, sorted), listed as the owner could; None where it may not."""
        if self.fd is None or self.owner is None or not os.path.isabs(dirname):
            return None
        base = self.fd

        def listing() -> list[str] | None:
            try:
                fd = openat2(base, dirname.lstrip("/") or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
                             RESOLVE_NO_MAGICLINKS | RESOLVE_IN_ROOT)
            except OSError:
                return None
            try:
                return sorted(os.listdir(fd))[:limit]
            except OSError:
                return None
            finally:
                os.close(fd)

        try:
            return as_identity(self.owner, listing)
        except AccessCheckFailed:
            return None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
