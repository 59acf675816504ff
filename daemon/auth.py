"""Who is calling, and may they profile that process.

The caller's identity comes from the kernel: the relay (daemon/relay.py) reads SO_PEERCRED and
SO_PEERGROUPS of each connection on the public socket and registers them under the name of the
private connection it opens for it, which is what gRPC reports as `context.peer()`. A request whose
peer is not registered is refused.

The rule mirrors what the kernel would let the caller do with ptrace itself: root and members of the
`deepctx` group may profile any process; anyone else only processes whose real, effective, saved and
filesystem uids and gids are all the caller's and that are dumpable (no setuid/setgid programs). Loading
the CUPTI agent writes into the target, so for those callers it also needs Yama's ptrace_scope 0 (where
the caller could attach a debugger to that process too).
"""

from __future__ import annotations

import grp
import os
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any

import grpc

from deepctx.daemon.errors import InvalidArgument, NotFound, PermissionDenied, RequestError

GROUP = "deepctx"
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux 4.13+; the constant is missing from older Pythons
_GROUPS_BUFLEN = 1024  # the most getsockopt() takes from Python: 256 groups


class Unauthenticated(RequestError):
    code = grpc.StatusCode.UNAUTHENTICATED


@dataclass(frozen=True)
class Caller:
    pid: int
    uid: int
    gid: int
    groups: frozenset[int]

    @property
    def privileged(self) -> bool:
        """Root, or a member of the `deepctx` group (primary or supplementary)."""
        if self.uid == 0:
            return True
        gid = deepctx_gid()
        return gid is not None and (gid == self.gid or gid in self.groups)

    def describe(self) -> str:
        return f"uid {self.uid} (pid {self.pid})"


def deepctx_gid() -> int | None:
    try:
        return grp.getgrnam(GROUP).gr_gid
    except KeyError:
        return None


def peer_credentials(conn: socket.socket) -> Caller:
    """The connecting process's pid, uids and groups, as the kernel recorded them at connect()."""
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, _GROUPS_BUFLEN)
        groups = frozenset(struct.unpack(f"{len(raw) // 4}I", raw))
    except OSError:
        groups = frozenset()  # more than 256 groups, or an old kernel: only uid and primary gid count
    return Caller(pid, uid, gid, groups)


class PeerRegistry:
    """gRPC peer string -> Caller, for the connections the relay holds open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._peers: dict[str, Caller] = {}

    def add(self, peer: str, caller: Caller) -> None:
        with self._lock:
            self._peers[peer] = caller

    def remove(self, peer: str) -> None:
        with self._lock:
            self._peers.pop(peer, None)

    def lookup(self, peer: str) -> Caller | None:
        with self._lock:
            return self._peers.get(peer)

    def __len__(self) -> int:
        with self._lock:
            return len(self._peers)


PEERS = PeerRegistry()  # the daemon's one registry: the relay fills it, the service reads it


def caller_of(context: Any, registry: PeerRegistry = PEERS) -> Caller:
    """The caller of an RPC; raises Unauthenticated for a connection the relay did not make."""
    caller = registry.lookup(context.peer())
    if caller is None:
        raise Unauthenticated("unknown connection: deepctxd answers only on its public socket")
    return caller


def _ids(status: str, field: str) -> list[int]:
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return [int(x) for x in line.split()[1:]]
    return []


def refusal(caller: Caller, pid: int, inject: bool = False) -> str | None:
    """Why caller may not profile pid (None: it may). Raises NotFound for a process that is gone."""
    if caller.privileged:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        # /proc/<pid> belongs to root while the process is not dumpable (setuid, setgid, prctl).
        st = os.stat(f"/proc/{pid}")
    except FileNotFoundError:
        raise NotFound(f"process {pid} does not exist") from None
    except OSError as e:
        return f"cannot read process {pid}: {e.strerror}"
    uids, gids = _ids(status, "Uid"), _ids(status, "Gid")
    if not uids or any(u != caller.uid for u in uids) or st.st_uid != caller.uid:
        return (f"process {pid} belongs to another user: profiling it needs root or the `{GROUP}` group "
                f"(caller {caller.describe()})")
    if any(g != caller.gid for g in gids) or st.st_gid != caller.gid:
        return (f"process {pid} runs with other group ids than the caller (setgid?): profiling it needs root "
                f"or the `{GROUP}` group")
    if inject and _yama_scope() != 0:
        return (f"loading the GPU activity agent into process {pid} needs root or the `{GROUP}` group here "
                f"(kernel.yama.ptrace_scope is not 0)")
    return None


def _yama_scope() -> int:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0  # no Yama: classic ptrace rules, which the uid and gid checks above mirror


def authorize(context: Any, pid: int, inject: bool = False, registry: PeerRegistry = PEERS) -> Caller:
    """The caller, when it may profile pid (and load the agent into it, with inject); raises
    Unauthenticated, PermissionDenied, NotFound or InvalidArgument otherwise."""
    caller = caller_of(context, registry)
    if caller.privileged:
        return caller
    if pid <= 0:
        raise InvalidArgument(f"pid must be a positive process id, not {pid}")
    why = refusal(caller, pid, inject)
    if why:
        raise PermissionDenied(why)
    return caller


def visible_uid(caller: Caller) -> int | None:
    """Whose stored windows the caller may read: None for everyone's, else the caller's own."""
    return None if caller.privileged else caller.uid
