"""A process bound by a pidfd, so that a decision made about it holds for the process acted on.

A pid number is reused once its process is gone; a pidfd is not. The daemon opens the handle first,
checks the process through it (authorization reads /proc/PID after the pidfd exists, then confirms the
pidfd still names a live process, so what was read was that process), and confirms it again right
before acting by pid number (ptrace, injection).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field

from deepctx.host.procfs import ProcessGone


def start_time(pid: int) -> int:
    """When pid started; raises ProcessGone. (pid, start time) names one process for good."""
    return _start_time(pid)


def _start_time(pid: int) -> int:
    """Clock ticks since boot at which pid started (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError) as e:
        raise ProcessGone(pid) from e
    return int(stat[stat.rindex(")") + 2:].split()[19])


@dataclass
class ProcessHandle:
    pid: int
    pidfd: int
    start_time: int
    _closed: bool = field(default=False, repr=False)

    @classmethod
    def open(cls, pid: int) -> ProcessHandle:
        """Binds pid now; raises ProcessGone when there is no such process."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError as e:
            raise ProcessGone(pid) from e
        try:
            handle = cls(pid, fd, _start_time(pid))
            handle.ensure()  # the start time read after the pidfd is the pidfd's process
            return handle
        except BaseException:
            os.close(fd)
            raise

    def alive(self) -> bool:
        """The bound process has not been reaped (a zombie still holds its pid: no reuse yet)."""
        if self._closed:
            return False
        try:
            signal.pidfd_send_signal(self.pidfd, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # not root (tests): a live process we may not signal is still alive
            return True
        return True

    def ensure(self) -> None:
        """Raises ProcessGone unless pid still names the bound process: checked through the pidfd (not
        reaped, so the number is not reused) and the start time /proc shows for the number."""
        if not self.alive():
            raise ProcessGone(self.pid)
        try:
            same = _start_time(self.pid) == self.start_time
        except ProcessGone:
            same = False
        if not same or not self.alive():
            raise ProcessGone(self.pid)

    def owns_thread(self, tid: int) -> bool:
        """tid is a thread of the bound process, now (call with the thread held, e.g. seized)."""
        if not self.alive():
            return False
        return os.path.exists(f"/proc/{self.pid}/task/{tid}")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.pidfd)

    def __enter__(self) -> ProcessHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
