"""The relay in front of a real gRPC server: callers are known by their kernel credentials, connections
that bypass the relay are refused, the private directory is root's alone, limits are counted."""

from __future__ import annotations

import os
import socket
import stat
import struct
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from harness import wait_for

from deepctx.daemon import auth
from deepctx.daemon.auth import Caller, PeerRegistry
from deepctx.daemon.relay import Relay
from deepctx.daemon.rpc_guard import RpcGuard
from deepctx.daemon.rpc_limits import OverLimit, RpcLimits

WHOAMI = "/test.Who/Am"


class Served:
    def __init__(self, tmp: Path, max_connections: int = 64, registry: PeerRegistry | None = None,
                 limits: RpcLimits | None = None) -> None:
        self.registry = registry if registry is not None else PeerRegistry()  # (an empty one is falsy)
        self.relay = Relay(str(tmp / "d.sock"), 0o666, self.registry, max_connections=max_connections)
        self.guard = RpcGuard(self.registry, limits)
        self.server = grpc.server(futures.ThreadPoolExecutor(4), interceptors=[self.guard])

        def whoami(raw: bytes, context: grpc.ServicerContext) -> bytes:
            c = auth.caller_of(context, self.registry)
            return struct.pack("3i", c.pid, c.uid, c.gid)

        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Who", {
            "Am": grpc.unary_unary_rpc_method_handler(whoami)})])
        health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), self.server)
        assert self.server.add_insecure_port(self.relay.prepare()) != 0
        self.server.start()
        self.relay.start()

    def stop(self) -> None:
        self.relay.stop_accepting()
        self.server.stop(1).wait()
        self.relay.stop()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path)
    yield s
    s.stop()


def call(path: str, method: str = WHOAMI, body: bytes = b"") -> bytes:
    with grpc.insecure_channel(f"unix:{path}") as ch:
        return ch.unary_unary(method)(body, timeout=10)


def test_the_server_sees_the_callers_kernel_credentials(served: Served) -> None:
    assert struct.unpack("3i", call(served.relay.public_path)) == (os.getpid(), os.getuid(), os.getgid())
    assert served.relay.counters.accepted == 1


def test_a_connection_that_bypasses_the_relay_is_refused(served: Served) -> None:
    with pytest.raises(grpc.RpcError) as e:
        call(served.relay.private_socket)  # root can reach it; no one else can (below)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as e:
        with grpc.insecure_channel(f"unix:{served.relay.private_socket}") as ch:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert served.guard.refused == 2


def test_private_directory_and_public_socket_modes(served: Served) -> None:
    st = os.lstat(served.relay.private_dir)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert stat.S_IMODE(os.stat(served.relay.public_path).st_mode) == 0o666
    assert os.listdir(served.relay.private_dir) == ["grpc"]  # relay connections leave no files


def test_undecodable_request_is_invalid_argument(served: Served) -> None:
    with pytest.raises(grpc.RpcError) as e:
        call(served.relay.public_path, "/grpc.health.v1.Health/Check", b"\xff\xff\xff")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert served.guard.malformed == 1


def test_connections_over_the_limit_are_refused_and_counted(tmp_path: Path) -> None:
    s = Served(tmp_path, max_connections=1)
    try:
        first = socket.socket(socket.AF_UNIX)
        first.connect(s.relay.public_path)
        wait_for(lambda: s.relay.active() == 1, 10, "the relay to take the first connection")
        with pytest.raises(grpc.RpcError) as e:
            call(s.relay.public_path)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert s.relay.counters.refused >= 1  # gRPC may reconnect once more before the call gives up
        first.close()
    finally:
        s.stop()


def test_stale_private_directory_is_replaced_and_a_foreign_one_refused(tmp_path: Path) -> None:
    r = Relay(str(tmp_path / "x.sock"), 0o666, PeerRegistry())
    os.mkdir(r.private_dir)
    (Path(r.private_dir) / "grpc").write_text("left by a killed daemon")
    r.prepare()
    assert os.listdir(r.private_dir) == []
    os.rmdir(r.private_dir)
    os.symlink("/tmp", r.private_dir)
    with pytest.raises(OSError, match="not deepctxd's own directory"):
        r.prepare()


def test_refusal_rules_on_real_processes() -> None:
    me = Caller(os.getpid(), 4242, 4242, frozenset())
    # the kernel lets a thread read its own process: the daemon refuses itself by name
    assert auth.refusal(me, os.getpid()) == "deepctxd does not profile itself"
    # the owner rules, on a process of an unprivileged user (root starts one; others use their own)
    import subprocess

    uid = gid = 65534 if os.geteuid() == 0 else None
    # the child says it runs: Popen returns once exec has closed the child's pipe, before the kernel marks the
    # new image dumpable (CI once saw "not dumpable" there); a line printed by the new image comes after that
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                            user=uid, group=gid, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    try:
        st = os.stat(f"/proc/{proc.pid}")
        owner = Caller(1, st.st_uid, st.st_gid, frozenset())
        assert not owner.privileged and auth.refusal(owner, proc.pid) is None
        assert "belongs to another user" in (auth.refusal(Caller(1, st.st_uid + 1, st.st_gid, frozenset()), proc.pid) or "")
        assert "other group ids" in (auth.refusal(Caller(1, st.st_uid, st.st_gid + 1, frozenset()), proc.pid) or "")
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(auth.NotFound):
        auth.refusal(me, 2**22 + 4321)
    assert Caller(1, 0, 0, frozenset()).privileged


def test_rpc_limits_per_user_and_for_all_users_root_never_counted() -> None:
    limits = RpcLimits(per_user=2, users_total=3)
    a = [limits.acquire(1000), limits.acquire(1000)]
    with pytest.raises(OverLimit, match=r"uid 1000: at most 2 at once per user \(max_rpcs_per_user\)"):
        limits.acquire(1000)
    b = limits.acquire(1001)
    with pytest.raises(OverLimit, match=r"at most 3 at once \(max_user_rpcs\)"):
        limits.acquire(1002)
    roots = [limits.acquire(0) for _ in range(100)]  # root: always, and never counted
    assert limits.total == 3 and limits.held(0) == 0 and limits.refused == 2
    a[0].release()
    a[0].release()  # idempotent: the handler's end and the RPC's end both release
    assert limits.held(1000) == 1 and limits.total == 2
    limits.acquire(1002)
    for slot in [a[1], b, *roots]:
        slot.release()
    assert limits.total == 1


class _AllAsUser(PeerRegistry):
    """Every connection's caller seen as uid 4242 (the test runs as root, whom the limits never count)."""

    def lookup(self, peer: str) -> Caller | None:
        c = super().lookup(peer)
        return None if c is None else Caller(c.pid, 4242, c.gid, c.groups)


def test_streams_held_open_count_against_the_user_until_they_end(tmp_path: Path) -> None:
    s = Served(tmp_path, registry=_AllAsUser(), limits=RpcLimits(per_user=2, users_total=8))
    try:
        with grpc.insecure_channel(f"unix:{s.relay.public_path}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            held = [stub.Watch(health_pb2.HealthCheckRequest()) for _ in range(2)]
            for w in held:
                assert next(w).status == health_pb2.HealthCheckResponse.SERVING
            over = stub.Watch(health_pb2.HealthCheckRequest())
            with pytest.raises(grpc.RpcError) as e:
                next(over)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "uid 4242: at most 2 at once per user (max_rpcs_per_user)" in e.value.details()
            held[0].cancel()  # a cancelled stream gives its slot back
            wait_for(lambda: s.guard.limits is not None and s.guard.limits.held(4242) == 1, 10, "slot released")
            again = stub.Watch(health_pb2.HealthCheckRequest())
            assert next(again).status == health_pb2.HealthCheckResponse.SERVING
            again.cancel()
            held[1].cancel()
        wait_for(lambda: s.guard.limits is not None and s.guard.limits.total == 0, 10, "every slot released")
    finally:
        s.stop()
