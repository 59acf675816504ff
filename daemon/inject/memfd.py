"""The agent's bytes handed to a target in a sealed memory file, so that nothing is written into the
target's filesystem and nothing at a path the target controls is trusted.

The target creates the memfd (memfd_create, in a thread borrowed through ptrace); the daemon takes a
duplicate of that descriptor through the target's pidfd (pidfd_getfd: same open file, no more access than
the target had, no path followed), checks it is a fresh, unsealed memfd, writes the agent into it, seals
it against every change, and reads it back: the target could write between our write and the seal, so
only a sealed file whose content hashes to the agent's is accepted. The target then dlopens
/proc/self/fd/N; the daemon attaches its probes to its own sealed descriptor."""

from __future__ import annotations

import ctypes as ct
import fcntl
import hashlib
import os
import stat
from dataclasses import dataclass

MFD_CLOEXEC = 0x1
MFD_ALLOW_SEALING = 0x2
SYS_MEMFD_CREATE = 319  # x86-64
SYS_PIDFD_GETFD = 438
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_CHUNK = 1 << 20

_libc = ct.CDLL(None, use_errno=True)
_libc.syscall.restype = ct.c_long


class Refused(ValueError):
    """The descriptor the target handed over is not a fresh memfd holding exactly the agent."""


def pidfd_getfd(pidfd: int, target_fd: int) -> int:
    """A duplicate (close-on-exec) of descriptor target_fd of the process behind pidfd."""
    fd = _libc.syscall(ct.c_long(SYS_PIDFD_GETFD), ct.c_int(pidfd), ct.c_int(target_fd), ct.c_uint(0))
    if fd < 0:
        err = ct.get_errno()
        raise OSError(err, f"pidfd_getfd: {os.strerror(err)}")
    return int(fd)


@dataclass
class SealedAgent:
    """The daemon's own descriptor of the sealed agent file: its probes attach through `path`, and the
    target's mappings of it are found by (st_dev, st_ino). Valid until close()."""

    fd: int
    st_dev: int
    st_ino: int

    @property
    def path(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    @property
    def maps_dev(self) -> str:
        """st_dev as /proc/PID/maps prints it ("major:minor" in hex)."""
        return f"{os.major(self.st_dev):02x}:{os.minor(self.st_dev):02x}"

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _check_fresh(fd: int) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 0:
        raise Refused("the file the process created for the agent is not a memory file")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError as e:  # only memfd (shmem, hugetlbfs) files have seals
        raise Refused("the file the process created for the agent is not a memory file") from e
    if seals != 0 or st.st_size != 0:
        raise Refused("the memory file the process created for the agent was changed before the agent was written")
    return st


def _read_all(fd: int, size: int) -> bytes:
    parts = []
    off = 0
    while off < size:
        part = os.pread(fd, min(_CHUNK, size - off), off)
        if not part:
            break
        parts.append(part)
        off += len(part)
    return b"".join(parts)


def fill_and_seal(fd: int, data: bytes) -> SealedAgent:
    """Writes data into the fresh memfd fd (our duplicate of the target's), seals it and checks what it
    holds; raises Refused (fd left open: the caller closes it) unless the sealed file is exactly data."""
    st = _check_fresh(fd)
    off = 0
    while off < len(data):  # pwrite: the offset of the shared open file is the target's too
        n = os.pwrite(fd, data[off:off + _CHUNK], off)
        if n <= 0:
            raise Refused("the agent could not be written into the process's memory file")
        off += n
    try:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except OSError as e:  # EBUSY: the target holds a writable shared mapping of it; EPERM: it sealed it
        raise Refused(f"the process's memory file for the agent could not be sealed ({os.strerror(e.errno or 0)})") from e
    if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS != SEALS:
        raise Refused("the process's memory file for the agent could not be sealed")
    size = os.fstat(fd).st_size
    if size != len(data) or hashlib.sha256(_read_all(fd, size)).digest() != hashlib.sha256(data).digest():
        raise Refused("the process changed the agent's memory file while it was written: nothing was loaded")
    return SealedAgent(fd, st.st_dev, st.st_ino)
