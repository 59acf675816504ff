"""Every bad request gets a clear message and a non-zero exit, and the daemon keeps serving."""

from __future__ import annotations

import concurrent.futures as cf
import json
import math
import os
from pathlib import Path

import grpc
import pytest
from harness import Target, wait_for

from deepctx.proto.v1 import deepctx_pb2 as pb
from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc


def unused_pid() -> int:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    for pid in range(pid_max - 1, 1, -1):
        if not os.path.exists(f"/proc/{pid}"):
            return pid
    raise AssertionError("no free pid")


def assert_refused(daemon, args: list[str], message: str, rc: int = 1) -> None:
    r = daemon.cli(*args)
    assert r.returncode == rc, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr  # one line
    assert daemon.alive()


def test_pid_that_does_not_exist(daemon) -> None:
    pid = unused_pid()
    assert_refused(daemon, ["attach", str(pid), "--duration", "1"], f"process {pid} does not exist")


@pytest.mark.parametrize(("duration", "message"), [
    ("0", "duration must be a finite number of seconds above 0, not 0"),
    ("-3", "duration must be a finite number of seconds above 0, not -3"),
    ("nan", "duration must be a finite number of seconds above 0, not nan"),
    ("inf", "duration must be a finite number of seconds above 0, not inf"),
    ("1e9", "duration 1e+09 s is longer than this daemon allows (3600 s"),
])
def test_absurd_durations(daemon, native_targets: Path, duration: str, message: str) -> None:
    with Target([str(native_targets / "cpu_burner"), "30"]) as t:
        assert_refused(daemon, ["attach", str(t.pid), "--duration", duration], message)


@pytest.mark.parametrize(("rate", "message", "rc"), [
    ("20000", "sampling rate 20000 Hz is out of range: use 1 to 10000 Hz", 1),
    ("-5", "--rate must be a positive number", 2),
])
def test_sampling_rates_out_of_range(daemon, native_targets: Path, rate: str, message: str, rc: int) -> None:
    with Target([str(native_targets / "cpu_burner"), "30"]) as t:
        assert_refused(daemon, ["attach", str(t.pid), "--duration", "1", "--rate", rate], message, rc)


@pytest.mark.parametrize(("flags", "message", "rc"), [
    (["--gpu-duty", "1.5"], "--gpu-duty must be a share above 0 and at most 1 (e.g. 0.1), not 1.5", 2),
    (["--gpu-duty", "0"], "--gpu-duty must be a share above 0 and at most 1 (e.g. 0.1), not 0", 2),
    (["--gpu-duty", "0.5", "--gpu-duty-period", "0"], "--gpu-duty-period must be a positive number of seconds, "
                                                       "not 0", 2),
    (["--gpu-duty", "0.1", "--gpu-duty-period", "-2"], "--gpu-duty-period must be a positive number of seconds", 2),
    (["--gpu-duty", "0.01"], "a GPU duty share of 0.01 of 2 s keeps the GPU probes on 0.02 s a period", 1),
    (["--gpu-duty", "0.5", "--gpu-duty-period", "0.1"], "GPU duty period 0.1 s is out of range: use 0.5 to 600 s", 1),
    (["--gpu-duty", "0.5", "--gpu-duty-period", "nan"], "GPU duty period nan s is out of range", 1),
    (["--gpu-duty-period", "4"], "a GPU duty period needs a GPU duty share below 1 (--gpu-duty)", 1),
    (["--gpu-duty", "0.5", "--trace"], "a trace records every call and kernel: it cannot run with a GPU duty share", 1),
    (["--gpu-duty", "0.5", "--no-gpu"], "a GPU duty share switches the GPU probes: it cannot run with --no-gpu", 1),
])
def test_gpu_duty_out_of_range(daemon, native_targets: Path, flags: list[str], message: str, rc: int) -> None:
    with Target([str(native_targets / "cpu_burner"), "30"]) as t:
        assert_refused(daemon, ["attach", str(t.pid), "--duration", "1", *flags], message, rc)


@pytest.mark.parametrize(("flags", "message"), [
    (["--pc-sampling"], "--pc-sampling needs --gpu-activity: the samples come from the CUPTI agent"),
    (["--gpu-activity", "--pc-sampling", "--kernel", "(gemm"], "--kernel '(gemm': not a regular expression"),
    (["--gpu-activity", "--pc-sampling", "--pc-period", "40"], "--pc-period 40: must be 5 to 31 (2^N cycles)"),
    (["--gpu-activity", "--kernel", "gemm"], "--kernel needs --pc-sampling"),
])
def test_pc_sampling_flags(daemon, native_targets: Path, flags: list[str], message: str) -> None:
    with Target([str(native_targets / "cpu_burner"), "30"]) as t:
        assert_refused(daemon, ["attach", str(t.pid), "--duration", "1", *flags], message, 2)


def test_kernel_thread(daemon) -> None:
    assert_refused(daemon, ["attach", "2", "--duration", "1"], "is a kernel thread")


def test_the_daemon_itself(daemon) -> None:
    assert_refused(daemon, ["attach", str(daemon.proc.pid), "--duration", "1"], "deepctxd does not profile itself")


def test_target_exits_during_the_capture(daemon, native_targets: Path) -> None:
    with Target([str(native_targets / "cpu_burner"), "60"]) as t:
        with cf.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(daemon.attach_json, t.pid, "--duration", "30")

            def sampled() -> bool:
                st = json.loads(daemon.cli("status", "--format", "json").stdout)
                return any(s["pid"] == t.pid and int(s["stats"].get("cpu_samples", 0)) >= 20
                           for s in st.get("sessions") or [])

            wait_for(sampled, what="samples of the target")
            t.stop()  # the target dies in the middle of the capture
            doc = fut.result()
    assert doc["ended"] == "target_exited"
    assert doc["duration_s"] < 30  # the capture ended with the target, not after the 30 s asked for
    assert any(f"process {t.pid} exited after" in w for w in doc["warnings"])
    names = {n["name"] for c in doc["root"]["children"] for n in _descendants(c)}
    assert "hot_loop" in names  # what was captured before the exit is kept and symbolized
    assert daemon.alive()


def _descendants(node: dict) -> list[dict]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n["children"])
    return out


def test_second_attach_to_the_same_pid_is_refused(daemon, native_targets: Path) -> None:
    with Target([str(native_targets / "cpu_burner"), "30"]) as t:
        with cf.ThreadPoolExecutor(1) as pool:
            first = pool.submit(daemon.attach_json, t.pid, "--duration", "4")

            def capturing() -> bool:
                st = json.loads(daemon.cli("status", "--format", "json").stdout)
                return any(s["pid"] == t.pid and s["state"] == "capturing" for s in st.get("sessions") or [])

            wait_for(capturing, what="first capture running")
            assert_refused(daemon, ["attach", str(t.pid), "--duration", "1"],
                           f"process {t.pid} is already being profiled")
            assert first.result()["pid"] == t.pid


def test_malformed_request_bytes(daemon) -> None:
    channel = grpc.insecure_channel(f"unix://{daemon.socket}")
    call = channel.unary_stream("/deepctx.v1.Profiler/Attach", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        list(call(b"\xff\xff\xff\xff\x0f garbage", timeout=10))
    assert e.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)
    channel.close()
    assert daemon.alive()


def test_raw_api_statuses(daemon) -> None:
    """The gRPC status codes themselves, for API clients other than the CLI."""
    channel = grpc.insecure_channel(f"unix://{daemon.socket}")
    stub = pb_grpc.ProfilerStub(channel)
    cases = [
        (pb.AttachRequest(pid=0, duration_s=1), grpc.StatusCode.INVALID_ARGUMENT, "pid must be a positive"),
        (pb.AttachRequest(pid=-7, duration_s=1), grpc.StatusCode.INVALID_ARGUMENT, "pid must be a positive"),
        (pb.AttachRequest(pid=unused_pid(), duration_s=1), grpc.StatusCode.NOT_FOUND, "does not exist"),
        (pb.AttachRequest(pid=1, duration_s=math.inf), grpc.StatusCode.INVALID_ARGUMENT, "duration"),
        (pb.AttachRequest(pid=1, duration_s=1, python=99), grpc.StatusCode.INVALID_ARGUMENT, "unknown python mode"),
        (pb.AttachRequest(pid=1, duration_s=1, gpu_duty=-0.5), grpc.StatusCode.INVALID_ARGUMENT,
         "GPU duty must be a share within (0, 1], not -0.5"),
        (pb.AttachRequest(pid=1, duration_s=1, gpu_duty=math.nan), grpc.StatusCode.INVALID_ARGUMENT, "GPU duty must"),
        (pb.AttachRequest(pid=1, duration_s=1, pc_sampling=pb.PcSampling()), grpc.StatusCode.INVALID_ARGUMENT,
         "PC sampling needs device activity (--gpu-activity): the samples come from the CUPTI agent"),
        (pb.AttachRequest(pid=1, duration_s=1, gpu_activity=pb.GPU_ACTIVITY_ON, pc_sampling=pb.PcSampling(kernel="(")),
         grpc.StatusCode.INVALID_ARGUMENT, "kernel filter '(' is not a regular expression"),
        (pb.AttachRequest(pid=1, duration_s=1, gpu_activity=pb.GPU_ACTIVITY_ON, pc_sampling=pb.PcSampling(period=4)),
         grpc.StatusCode.INVALID_ARGUMENT, "PC sampling period 4 is out of range: use 5 to 31 (2^N cycles)"),
        (pb.AttachRequest(pid=1, duration_s=1, gpu_activity=pb.GPU_ACTIVITY_ON,
                          pc_sampling=pb.PcSampling(duration_ms=3_600_001)),
         grpc.StatusCode.INVALID_ARGUMENT, "PC sampling duration 3600001 ms is out of range: at most 3600000 ms"),
    ]
    for req, code, text in cases:
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Attach(req, timeout=10))
        assert e.value.code() == code and text in e.value.details(), (req, e.value)
    channel.close()
    assert daemon.alive()


def test_stop_ends_a_capture_early_with_its_profile(daemon, native_targets: Path) -> None:
    with Target([str(native_targets / "cpu_burner"), "60"]) as t:
        with cf.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(daemon.attach_json, t.pid, "--duration", "600")

            def sampled() -> bool:
                st = json.loads(daemon.cli("status", "--format", "json").stdout)
                return any(s["pid"] == t.pid and int(s["stats"].get("cpu_samples", 0)) >= 20
                           for s in st.get("sessions") or [])

            wait_for(sampled, what="samples of the target")
            r = daemon.cli("stop", str(t.pid))
            assert r.returncode == 0 and r.stdout.strip() == f"stopped 1 capture of process {t.pid}"
            doc = fut.result()
        assert t.proc.poll() is None  # the target was not touched
    assert doc["ended"] == "stopped" and doc["warnings"] == []
    assert doc["duration_s"] < 60
    names = {n["name"] for c in doc["root"]["children"] for n in _descendants(c)}
    assert "hot_loop" in names


def test_stop_without_a_capture(daemon) -> None:
    assert_refused(daemon, ["stop", "1"], "no capture of process 1 is running")
