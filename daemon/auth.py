"""Who is calling, and may they profile that process.

The caller's identity comes from the kernel: the relay (daemon/relay.py) reads SO_PEERCRED and
SO_PEERGROUPS of each connection on the public socket and registers them under the name of the
private connection it opens for it, which is what gRPC reports as `context.peer()`. A request whose
peer is not registered is refused.

Root and members of the `deepctx` group may profile any process (policy). Anyone else may profile what
the kernel lets them read: the kernel itself is asked, as the caller, whether the memory of every thread
of the process opens (daemon/access.py); reading and writing it (the CUPTI agent) take the same check. The
decision is bound to the process (a pidfd opened first, see grant()) and re-checked while the capture
runs (daemon/capture_guard.py). A thread id is refused for everyone: it is not a process.
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

from deepctx.daemon import access, credentials
from deepctx.daemon.capture_guard import CredentialGuard
from deepctx.daemon.errors import InvalidArgument, NotFound, PermissionDenied, RequestError
from deepctx.host.identity import GROUP
from deepctx.host.process_handle import ProcessHandle
from deepctx.host.procfs import ProcessGone

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


def _explain(caller: Caller, pid: int) -> str | None:
    """Why the kernel refused the caller access to pid's memory, in words (None: no reason found here).
    Only an explanation: the decision is the kernel's (access.memory_refusal)."""
    advice = _advice()
    try:
        threads = credentials.threads(pid)
    except ProcessGone:
        return None
    leader = threads[0]
    if any(u != caller.uid for u in leader.uids):
        return f"process {pid} belongs to another user: {advice} (caller {caller.describe()})"
    if any(g != caller.gid for g in leader.gids):
        return f"process {pid} runs with other group ids than the caller (setgid?): {advice}"
    for t in threads[1:]:
        if any(u != caller.uid for u in t.uids) or any(g != caller.gid for g in t.gids):
            return (f"thread {t.tid} of process {pid} runs with other user or group ids (uids "
                    f"{'/'.join(map(str, t.uids))}) than the caller: {advice}")
    for t in threads:
        if t.cap_prm:
            who = f"process {pid}" if t.tid == pid else f"thread {t.tid} of process {pid}"
            return f"{who} holds capabilities the caller lacks (CapPrm {t.cap_prm:#x}): {advice}"
    if not all(t.dumpable for t in threads):
        return (f"process {pid} is not dumpable (a setuid or setgid program, or prctl(PR_SET_DUMPABLE, 0)): "
                f"{advice}")
    scope = _yama_scope()
    if scope:
        return f"the kernel does not let the caller read process {pid} (kernel.yama.ptrace_scope is {scope}): {advice}"
    return None


def _yama_scope() -> int:
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0  # no Yama


def check_process(pid: int) -> None:
    """pid names a live process (not one of its threads); raises InvalidArgument or NotFound."""
    if pid <= 0:
        raise InvalidArgument(f"pid must be a positive process id, not {pid}")
    try:
        tgid = credentials.tgid_of(pid)
    except ProcessGone:
        raise NotFound(f"process {pid} does not exist") from None
    if tgid != pid:
        raise InvalidArgument(f"{pid} is a thread of process {tgid}: attach to {tgid}")


def refusal(caller: Caller, pid: int) -> str | None:
    """Why caller may not profile pid (None: it may). Raises NotFound for a process that is gone.

    Root and the `deepctx` group may profile any process (policy). Anyone else may profile a process only
    when the kernel lets the caller read the memory of every one of its threads (PTRACE_MODE_ATTACH: uids
    and gids of each thread, dumpability, capabilities, Yama, security modules), asked as the caller
    (access.memory_refusal). Loading the agent writes that same memory: the same check covers it."""
    if caller.privileged:
        return None
    try:
        if credentials.tgid_of(pid) == os.getpid():
            return "deepctxd does not profile itself"
        why = access.memory_refusal(caller, pid)
    except ProcessGone:
        why = ""
    except access.AccessCheckFailed as e:  # nothing decided: refused
        return f"deepctxd could not check access to process {pid} as the caller: {e}"
    if why is None:
        return None
    if not os.path.exists(f"/proc/{pid}"):
        raise NotFound(f"process {pid} does not exist")
    return _explain(caller, pid) or f"{why}: {_advice()}"


def _advice() -> str:
    return f"profiling it needs root or the `{GROUP}` group"


def authorize(context: Any, pid: int, registry: PeerRegistry = PEERS) -> Caller:
    """The caller, when it may profile pid; raises Unauthenticated, PermissionDenied, NotFound or
    InvalidArgument otherwise (a thread id too, whoever asks)."""
    caller = caller_of(context, registry)
    check_process(pid)
    why = refusal(caller, pid)
    if why:
        raise PermissionDenied(why)
    return caller


@dataclass
class Grant:
    """An authorized capture's process, bound: its handle (pidfd, start time) and, for a caller outside
    root and the `deepctx` group, the guard that re-checks it while the capture runs."""

    caller: Caller
    handle: ProcessHandle
    guard: CredentialGuard | None


def grant(context: Any, pid: int, registry: PeerRegistry = PEERS) -> Grant:
    """authorize(), bound to the process: the pidfd is opened first, the decision is made about the process
    it names (handle.ensure() after the reads), and the guard's baseline is read before the kernel's answer."""
    caller = caller_of(context, registry)
    check_process(pid)
    try:
        handle = ProcessHandle.open(pid)
    except ProcessGone:
        raise NotFound(f"process {pid} does not exist") from None
    try:
        guard = None if caller.privileged else CredentialGuard(caller, pid)
        why = refusal(caller, pid)
        if why:
            raise PermissionDenied(why)
        handle.ensure()
    except ProcessGone:
        handle.close()
        raise NotFound(f"process {pid} exited while deepctx was checking it") from None
    except BaseException:
        handle.close()
        raise
    return Grant(caller, handle, guard)


def visible_uid(caller: Caller) -> int | None:
    """Whose stored windows the caller may read: None for everyone's, else the caller's own."""
    return None if caller.privileged else caller.uid
