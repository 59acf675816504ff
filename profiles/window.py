"""A window: one process's profile over one stretch of time, with who and where it ran."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Window:
    host: str
    pid: int
    command: str
    container: str  # container id from /proc/<pid>/cgroup, else the cgroup path ("/" on the host)
    start_unix: float
    end_unix: float
    profile: dict[str, Any]  # the deepctx.profile/v1 document of this window
    uid: int = -1  # the process's owner, who may read the window besides root and `deepctx`; -1: unknown
