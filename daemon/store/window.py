"""The window of a process, read from /proc while it lives: its container, its owner (profiles/window.py
holds the record)."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Any

from deepctx.profiles.window import Window

# Container runtimes put a 64-hex id in the cgroup path: docker-<id>.scope, cri-containerd-<id>.scope,
# crio-<id>.scope, /docker/<id>, libpod-<id>.scope, /kubepods/.../<id>.
_CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?(?:/|$)")


def container_from_cgroup(text: str) -> str:
    """The container id in a /proc/<pid>/cgroup file, else the unified (v2) cgroup path, else the first
    non-root v1 path, else "/"."""
    unified = ""
    v1 = ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        m = _CONTAINER_ID.search(parts[2])
        if m:
            return m.group(1)
        if parts[0] == "0" and parts[1] == "":
            unified = parts[2]
        elif not v1 and parts[2] not in ("", "/"):
            v1 = parts[2]
    if unified and unified != "/":
        return unified
    return v1 or unified or "/"


def container_of(pid: int) -> str:
    """The container (or cgroup) of a live process; "" when it is gone."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return container_from_cgroup(f.read())
    except OSError:
        return ""


def owner_of(pid: int) -> int:
    """Whose windows of a live process are: its real uid when the kernel would let that user (with the
    process's real gid) read the memory of every one of its threads; else 0, root's (seen by root and the
    `deepctx` group only: a setuid program, a non-dumpable process, one holding capabilities or a thread of
    other ids). -1 when it is gone."""
    from deepctx.daemon import access, credentials
    from deepctx.host.procfs import ProcessGone

    try:
        uid, gid = credentials.real_ids(pid)
    except ProcessGone:
        return -1
    if uid <= 0:
        return uid
    try:
        readable = access.memory_refusal(_Ids(uid, gid), pid) is None
    except access.AccessCheckFailed:
        readable = False
    if not os.path.exists(f"/proc/{pid}"):
        return -1
    return uid if readable else 0


@dataclass(frozen=True)
class _Ids:
    uid: int
    gid: int
    groups: frozenset[int] = frozenset()


def window_for(doc: dict[str, Any], start_unix: float, end_unix: float, container: str | None = None,
               uid: int | None = None) -> Window:
    """A window for a profile document of a process; container and owner read from /proc when not given
    (read them while the process lives)."""
    pid = int(doc.get("pid") or 0)
    return Window(host=str(doc.get("hostname") or socket.gethostname()), pid=pid, command=str(doc.get("command") or ""),
                  container=container if container is not None else container_of(pid),
                  start_unix=start_unix, end_unix=end_unix, profile=doc,
                  uid=uid if uid is not None else owner_of(pid))
