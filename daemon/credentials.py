"""What a process runs as, thread by thread, and whether that changed.

These are the facts deepctxd explains a refusal with and watches a running capture by; the decision
whether a caller may read a process is the kernel's (daemon/access.py). Credentials are per thread: a
thread may change its own with a raw system call while the others keep theirs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from deepctx.host.procfs import ProcessGone


@dataclass(frozen=True)
class ThreadCreds:
    tid: int
    uids: tuple[int, ...]  # real, effective, saved, filesystem
    gids: tuple[int, ...]
    cap_prm: int
    cap_eff: int
    dumpable: bool  # /proc/PID/task/TID/mem belongs to the euid (root's while the process is not dumpable)

    @property
    def key(self) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
        return self.uids, self.gids, self.cap_prm, self.cap_eff


def _field(status: str, name: str) -> list[str]:
    for line in status.splitlines():
        if line.startswith(name + ":"):
            return line.split()[1:]
    return []


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError) as e:
        raise ProcessGone(int(path.split("/")[2])) from e


def tgid_of(pid: int) -> int:
    """The thread group (process) pid belongs to: pid itself for a process, its process for a thread id.
    Raises ProcessGone."""
    tgid = _field(_read(f"/proc/{pid}/status"), "Tgid")
    return int(tgid[0]) if tgid else pid


def real_uid(pid: int) -> int:
    """The real uid of the process (whose user started it); raises ProcessGone."""
    uids = _field(_read(f"/proc/{pid}/status"), "Uid")
    return int(uids[0]) if uids else -1


def real_ids(pid: int) -> tuple[int, int]:
    """The real uid and gid of the process; raises ProcessGone."""
    status = _read(f"/proc/{pid}/status")
    uids, gids = _field(status, "Uid"), _field(status, "Gid")
    return (int(uids[0]) if uids else -1), (int(gids[0]) if gids else -1)


def threads(pid: int) -> list[ThreadCreds]:
    """Every live thread's credentials, the leader first; raises ProcessGone."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except (FileNotFoundError, ProcessLookupError) as e:
        raise ProcessGone(pid) from e
    out = []
    for tid in sorted(tids, key=lambda t: t != pid):
        try:
            status = _read(f"/proc/{pid}/task/{tid}/status")
            mem_owner = os.stat(f"/proc/{pid}/task/{tid}/mem").st_uid
        except (ProcessGone, FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
        uids = tuple(int(x) for x in _field(status, "Uid"))
        out.append(ThreadCreds(tid, uids, tuple(int(x) for x in _field(status, "Gid")),
                               int((_field(status, "CapPrm") or ["0"])[0], 16),
                               int((_field(status, "CapEff") or ["0"])[0], 16),
                               dumpable=len(uids) > 1 and mem_owner == uids[1]))
    if not out:
        raise ProcessGone(pid)
    return out


@dataclass(frozen=True)
class Fingerprint:
    """What a process runs as: the distinct credentials of its threads and its executable."""

    creds: frozenset[tuple[tuple[int, ...], tuple[int, ...], int, int]]
    exe: tuple[int, int] | None  # (device, inode); None where it cannot be read (a zombie)

    def differs(self, later: Fingerprint) -> bool:
        """later shows other credentials, or another executable (an exec); an unreadable executable
        (the process exiting) is not a difference by itself."""
        if self.exe is not None and later.exe is not None and self.exe != later.exe:
            return True
        return self.creds != later.creds


def fingerprint(pid: int) -> Fingerprint | None:
    """The process's fingerprint now; None when it is gone."""
    try:
        creds = frozenset(t.key for t in threads(pid))
    except ProcessGone:
        return None
    try:
        st = os.stat(f"/proc/{pid}/exe")
        exe: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except OSError:
        exe = None
    return Fingerprint(creds, exe)
