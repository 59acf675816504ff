"""Property-based fuzz of the gRPC API (hypothesis): any request, well-formed or not, ends in OK or a
clean status with a message, never UNKNOWN or INTERNAL, and the daemon keeps serving."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import grpc
import pytest
from harness import Daemon, Target, wait_for

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from deepctx.proto.v1 import deepctx_pb2 as pb  # noqa: E402
from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc  # noqa: E402

CLEAN = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
         grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.FAILED_PRECONDITION,
         grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.DEADLINE_EXCEEDED}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
METHODS = ["Attach", "Status", "ListProcesses", "Stop", "Top", "QueryProfile"]


class Env:
    daemon: Daemon
    stub: pb_grpc.ProfilerStub
    channel: grpc.Channel
    pids: list[int]
    codes: dict[str, int]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, native_targets) -> Iterator[Env]:
    from harness import stop_daemon
    from service_env import ServiceDir

    sd = ServiceDir()
    e = Env()
    e.daemon = sd.start("--max-sessions", "2", "--max-duration", "3")
    e.channel = grpc.insecure_channel(f"unix:{e.daemon.socket}")
    e.stub = pb_grpc.ProfilerStub(e.channel)
    e.codes = {}
    with Target([str(native_targets / "cpu_burner"), "600"]) as burner:
        e.pids = [0, -1, 1, 2, os.getpid(), e.daemon.proc.pid, burner.pid, 2**31 - 1, -(2**31), 4_000_000]
        yield e
    e.channel.close()
    assert stop_daemon(e.daemon) == 0, e.daemon.log.read_text()[-3000:]
    sd.remove()


def check(e: Env, call) -> None:  # noqa: ANN001
    try:
        result = call()
        if hasattr(result, "__iter__") and not isinstance(result, (bytes, pb.StatusReply)):
            for _ in result:
                pass
        code = grpc.StatusCode.OK
    except grpc.RpcError as err:
        code = err.code()
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED or err.details(), f"{code} without a message"
    assert code in CLEAN, f"{code}: {getattr(call, 'details', '')}"
    e.codes[code.name] = e.codes.get(code.name, 0) + 1


floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 0.01, 0.5, 1.0, 1e9]))
ints32 = st.integers(-(2**31), 2**31 - 1)
enums = st.integers(0, 7)


def pid_of(e: Env) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(e.pids), ints32)


@pytest.mark.slow
def test_fuzz_attach_and_stop(env: Env) -> None:
    @SETTINGS
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        req = pb.AttachRequest(pid=data.draw(pid_of(env)), duration_s=data.draw(floats),
                               sample_hz=data.draw(st.integers(0, 2**32 - 1)), kernel_stacks=data.draw(st.booleans()),
                               native_python=data.draw(st.booleans()), trace=data.draw(st.booleans()))
        for field in ("python", "gpu", "mode", "gpu_activity"):
            setattr(req, field, data.draw(enums))
        check(env, lambda: env.stub.Attach(req, timeout=1.5))
        check(env, lambda: env.stub.Stop(pb.StopRequest(pid=data.draw(pid_of(env))), timeout=10))

    run()


@pytest.mark.slow
def test_fuzz_queries_and_raw_bytes(env: Env) -> None:
    @SETTINGS
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        top = pb.TopRequest(since_unix=data.draw(floats), until_unix=data.draw(floats),
                            n=data.draw(st.integers(0, 2**32 - 1)), sort=data.draw(st.text(max_size=20)))
        check(env, lambda: env.stub.Top(top, timeout=10))
        q = pb.QueryProfileRequest(since_unix=data.draw(floats), until_unix=data.draw(floats),
                                   command=data.draw(st.text(max_size=50)), container=data.draw(st.text(max_size=50)))
        if data.draw(st.booleans()):
            q.pid = data.draw(ints32)
        check(env, lambda: env.stub.QueryProfile(q, timeout=10))
        check(env, lambda: env.stub.ListProcesses(pb.ListProcessesRequest(all=data.draw(st.booleans())), timeout=30))
        method = data.draw(st.sampled_from(METHODS))
        raw = data.draw(st.binary(max_size=64))
        path = f"/deepctx.v1.Profiler/{method}"
        if method == "Attach":
            call = env.channel.unary_stream(path)
            check(env, lambda: call(raw, timeout=1.5))
        else:
            call = env.channel.unary_unary(path)
            check(env, lambda: call(raw, timeout=10))

    run()


@pytest.mark.slow
def test_daemon_still_serves_after_the_fuzz(env: Env) -> None:
    wait_for(lambda: not json.loads(env.daemon.cli("status", "--format", "json").stdout).get("sessions"), 60,
             "fuzzed captures to end")
    assert env.daemon.alive()
    log = env.daemon.log.read_text()
    assert "Traceback" not in log and '"level": "error"' not in log
