"""The real rocprofiler-sdk agent (native/deepctx_rocprof.c) and the real BPF programs, driven by the mock HIP
runtime and mock rocprofiler-sdk of tests/mocks: the SDK's correlation ids and synthetic records with known
durations come out as exact GPU times under the HIP call, the kernel and the Python line that launched
them, through the same probes and join as the CUPTI agent (no AMD-specific logic in BPF or the daemon)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from capture_util import Result, run_capture
from device_paths import TARGET
from harness import DEEPCTX, StdinTarget, line_of, profile_phase, session_of, stop_run, wait_for
from profile_paths import walk
from test_device_join import at_line, gpu_time

from deepctx.daemon.device_tree import UNKNOWN_ORIGIN
from deepctx.daemon.trace import totals_by_kernel
from deepctx.host.frames import Frame
from deepctx.host.procfs import read_maps
from deepctx.probes import usdt
from deepctx.probes.device_activity import DEV_AGENT_E_CUPTI, DeviceActivity, agent_mappings

sys.path.insert(0, str(TARGET.parent))
import mock_target as mt  # noqa: E402

MATMUL = "mock_matmul(float*, int)"
RELU = "mock_relu(float*)"
TOTAL_NS = mt.N_MATMUL * mt.MATMUL_NS + mt.N_RELU * mt.RELU_NS + mt.N_COPY * mt.COPY_BYTES + mt.N_SET * mt.SET_BYTES
RECORDS = mt.N_MATMUL + mt.N_RELU + mt.N_COPY + mt.N_SET  # no record for hipDeviceSynchronize
CALLS = RECORDS + 1  # every tracked HIP call announces its correlation id, the sync too
HIP_LINES = {"LINE_HIP_MATMUL": ("kernel", MATMUL, mt.N_MATMUL * mt.MATMUL_NS),
             "LINE_HIP_RELU": ("kernel", RELU, mt.N_RELU * mt.RELU_NS),
             "LINE_HIP_COPY": ("memcpy", "HtoD", mt.N_COPY * mt.COPY_BYTES),
             "LINE_HIP_SET": ("memset", "memset", mt.N_SET * mt.SET_BYTES)}


def hip_env(agent: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_INJECTION64_PATH", "ROCP_TOOL_LIBRARIES")}
    if agent is not None:
        env["ROCP_TOOL_LIBRARIES"] = str(agent)
    return env


def start(built_rocprof: tuple[Path, Path], *args: str, tool: bool = True) -> StdinTarget:
    agent, lib = built_rocprof
    return StdinTarget([sys.executable, str(TARGET), str(lib), "--hip", *args], env=hip_env(agent if tool else None))


def phase(t: StdinTarget) -> Callable[[], None]:
    def work() -> None:
        t.go()
        t.expect("done")

    return work


@pytest.fixture(scope="module")
def exact(built_rocprof: tuple[Path, Path]) -> Result:
    t = start(built_rocprof)
    try:
        return run_capture(t.pid, phase(t), DeviceActivity())
    finally:
        t.stop()


def test_gpu_time_per_api_and_kernel_is_exact(exact: Result) -> None:
    assert gpu_time(exact, ("api", "hipLaunchKernel"), ("kernel", MATMUL)) == mt.N_MATMUL * mt.MATMUL_NS
    assert gpu_time(exact, ("api", "hipModuleLaunchKernel"), ("kernel", RELU)) == mt.N_RELU * mt.RELU_NS
    assert gpu_time(exact, ("api", "hipMemcpy"), ("memcpy", "HtoD")) == mt.N_COPY * mt.COPY_BYTES
    # HIP's memsets run as the runtime's fill kernel: the agent reports them as memsets
    assert gpu_time(exact, ("api", "hipMemset"), ("memset", "memset")) == mt.N_SET * mt.SET_BYTES
    assert exact.tree.total("gpu_time_ns") == TOTAL_NS


def test_gpu_time_per_python_line_is_exact(exact: Result) -> None:
    for marker, (kind, name, ns) in HIP_LINES.items():
        assert at_line(exact, line_of(TARGET, marker), kind, name) == ns, marker


def test_the_sdk_names_the_kernel_the_api_probes_could_not(exact: Result) -> None:
    """hipModuleLaunchKernel on a bare handle: only the SDK's kernel-symbol registration knows its name."""
    nodes = [n for n in exact.tree.nodes if n.frame.kind == "kernel" and n.frame.name == RELU
             and exact.tree.nodes[n.parent].frame.name == "hipModuleLaunchKernel"]
    assert len(nodes) == 1
    assert nodes[0].metrics["calls"] == mt.N_RELU
    assert nodes[0].metrics["gpu_time_ns"] == mt.N_RELU * mt.RELU_NS
    assert not [n for n in exact.tree.nodes if n.frame.name == "[unnamed kernel]"]
    assert not [n for n in exact.tree.nodes if "__amd_rocclr" in n.frame.name]


def test_every_record_is_accounted_for(exact: Result) -> None:
    s = exact.stats
    assert exact.flushed
    assert s["device_records"] == RECORDS
    assert s["device_records_unknown_correlation"] == 0
    assert s["device_records_before_capture"] == 0
    assert s["device_records_dropped_map_full"] == 0
    assert s["device_records_dropped_by_cupti"] == 0
    assert s["device_time_ns"] == TOTAL_NS == s["device_time_in_profile_ns"]
    assert s["device_correlations"] == CALLS
    assert s["device_correlations_outside_probed_calls"] == 0
    assert s["device_agent_flushes"] >= 1


def test_unknown_correlations_are_counted_not_dropped(built_rocprof: tuple[Path, Path]) -> None:
    t = start(built_rocprof)
    try:
        r = run_capture(t.pid, phase(t), DeviceActivity(), python=False,
                        before_flush=lambda bpf: bpf[b"dev_corr"].clear())
    finally:
        t.stop()
    assert r.stats["device_records_unknown_correlation"] == RECORDS
    unknown = sum(v for path, v in r.tree.paths_with("gpu_time_ns") if path[0] == UNKNOWN_ORIGIN)
    assert unknown == TOTAL_NS == r.stats["device_time_unknown_launch_ns"]
    assert r.tree.nodes[r.tree.node_for([UNKNOWN_ORIGIN, Frame("kernel", RELU)])].metrics["gpu_time_ns"] == \
        mt.N_RELU * mt.RELU_NS


def test_trace_mode_links_each_call_to_its_work_on_one_clock(built_rocprof: tuple[Path, Path]) -> None:
    """The SDK's clock (CLOCK_BOOTTIME; the mock's is also 1000 s ahead) comes out as CLOCK_MONOTONIC: each
    record starts after its call began, and within a second of it."""
    t = start(built_rocprof)
    try:
        r = run_capture(t.pid, phase(t), DeviceActivity(trace=True), python=False)
    finally:
        t.stop()
    apis = {e["correlation"]: e for e in r.trace if e["kind"] == "api"}
    work = [e for e in r.trace if e["kind"] != "api"]
    assert len(work) == RECORDS
    for e in work:
        launch = apis[e["correlation"]]
        assert launch["start_ns"] <= e["start_ns"] < launch["start_ns"] + 1_000_000_000, (launch, e)
        assert launch["tid"] == e["tid"] == t.pid
    assert totals_by_kernel(r.trace) == {MATMUL: mt.N_MATMUL * mt.MATMUL_NS, RELU: mt.N_RELU * mt.RELU_NS}
    assert {e["name"] for e in apis.values()} == {"hipLaunchKernel", "hipModuleLaunchKernel", "hipMemcpy",
                                                   "hipMemset", "hipDeviceSynchronize"}
    copies = [e for e in work if e["kind"] == "memcpy"]
    assert [(e["name"], e["bytes"], e["dur_ns"]) for e in copies] == [("Memcpy HtoD", mt.COPY_BYTES,
                                                                       mt.COPY_BYTES)] * mt.N_COPY
    assert r.stats["device_trace_events_lost"] == 0


def test_an_agent_nobody_watches_starts_no_context(built_rocprof: tuple[Path, Path]) -> None:
    """Loaded by the SDK at the first HIP call, no deepctxd: its tracing context is never started, so not a
    single callback runs in the application's HIP calls."""
    t = start(built_rocprof)
    try:
        t.go()
        assert t.expect("done").split()[1:] == ["0", "0"]
    finally:
        t.stop()


def test_the_agents_probes_are_the_cupti_agents(built_rocprof: tuple[Path, Path]) -> None:
    agent, _ = built_rocprof
    probes = usdt.read_probes(str(agent), "deepctx")
    assert sorted({p.name for p in probes}) == ["api_exit", "batch", "correlation", "flush_request", "flushed",
                                                 "sampling", "status", "stop_request"]
    assert all(p.semaphore_offset for p in probes)
    args = {p.name: len(p.args) for p in probes}
    assert args == {"correlation": 3, "api_exit": 1, "batch": 2, "flushed": 4, "status": 1, "flush_request": 0,
                    "sampling": 0, "stop_request": 0}
    # the correlation probe has two sites (every call, or a sample of them): one semaphore
    assert len({p.semaphore_offset for p in probes if p.name == "correlation"}) == 1


def test_attach_registers_late_before_hip_starts(built_rocprof: tuple[Path, Path]) -> None:
    """deepctx_agent_attach() in a process that loaded the SDK but has not initialized HIP yet:
    rocprofiler_force_configure takes the agent, and device times are exact."""
    agent, _ = built_rocprof
    t = start(built_rocprof, "--no-init", "--attach-agent", str(agent), tool=False)
    try:
        assert t.expect("attached").split()[1] == "0"
        r = run_capture(t.pid, phase(t), DeviceActivity())
    finally:
        t.stop()
    assert r.stats["device_records"] == RECORDS
    assert r.stats["device_time_ns"] == TOTAL_NS
    for marker, (kind, name, ns) in HIP_LINES.items():
        assert at_line(r, line_of(TARGET, marker), kind, name) == ns, marker


def test_attach_is_refused_once_hip_has_started(built_rocprof: tuple[Path, Path]) -> None:
    agent, _ = built_rocprof
    t = start(built_rocprof, "--attach-agent", str(agent), "--late-attach", tool=False)
    try:
        rc, error = t.expect("attached").split(maxsplit=2)[1:]
        assert int(rc) == DEV_AGENT_E_CUPTI
        assert "already configured" in error and "deepctx run" in error
        assert agent_mappings(read_maps(t.pid))
        t.go()
        assert t.expect("done").split()[1:] == ["0", "0"]  # unharmed, and nothing traced
    finally:
        t.stop()


def check_daemon_profile(doc: dict) -> None:
    """Each HIP line's GPU time, exact, and every record accounted for."""
    for marker, (kind, name, ns) in HIP_LINES.items():
        line = line_of(TARGET, marker)
        got: dict[tuple[str, str], int] = {}
        for anc, node in walk(doc):
            if node["metrics"]["gpu_time_ns"] and any(
                    a["kind"] == "python" and (a["file"] or "").endswith("mock_target.py") and a["line"] == line
                    for a in anc):
                got[(node["kind"], node["name"])] = got.get((node["kind"], node["name"]), 0) + \
                    node["metrics"]["gpu_time_ns"]
        # CI saw one mock_relu record of five missing here twice under load (not reproduced alone): the
        # warnings and the device counters say where it went next time
        assert got == {(kind, name): ns}, (marker, doc["warnings"],
                                           {k: v for k, v in doc["stats"].items() if k.startswith("device_")})
    stats = doc["stats"]
    assert stats["device_records"] == RECORDS
    assert stats["device_records_unknown_correlation"] == 0
    assert stats["device_time_ns"] == stats["device_time_in_profile_ns"] == TOTAL_NS


def test_deepctxd_attach_gives_exact_device_times(daemon, built_rocprof: tuple[Path, Path]) -> None:
    """The real daemon and CLI: `deepctx attach` on a HIP process whose SDK loaded the agent."""
    t = start(built_rocprof)
    try:
        doc = profile_phase(daemon, t)
    finally:
        t.stop()
    check_daemon_profile(doc)


def test_run_starts_a_hip_command_with_the_rocprof_agent(daemon, built_rocprof: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    """`deepctx run` names the agent in ROCP_TOOL_LIBRARIES; the SDK loads it at HIP's start, and the agent
    holds the process until the capture runs, so the profile has every record from the first call."""
    agent, lib = built_rocprof
    out = tmp_path / "run.json"
    env = hip_env(None) | {"DEEPCTX_SOCKET": daemon.socket, "DEEPCTX_ROCPROF_AGENT": str(agent)}
    run = StdinTarget([*DEEPCTX, "run", "--quiet", "--mode", "exact", "-o", str(out), "--format", "json", "--", sys.executable,
                       str(TARGET), str(lib), "--hip"], env=env)
    try:
        wait_for(lambda: session_of(daemon, run.pid) is not None, what="the capture of the HIP process")
        run.go()
        run.expect("done")
        stop_run(daemon, run)
    finally:
        run.stop()
    doc = json.loads(out.read_text())
    assert doc["ended"] == "stopped" and doc["stats"]["device_agent_injected"] == 0
    check_daemon_profile(doc)


def test_the_daemon_finds_the_rocprof_agent(built_rocprof: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    from deepctx.host.gpu_agents import find_rocprof_agent

    agent, _ = built_rocprof
    monkeypatch.delenv("DEEPCTX_ROCPROF_AGENT", raising=False)
    assert find_rocprof_agent() == str(agent)
    other = tmp_path / "libdeepctx_rocprof.so"
    other.write_bytes(agent.read_bytes())
    monkeypatch.setenv("DEEPCTX_ROCPROF_AGENT", str(other))
    assert find_rocprof_agent() == str(other)
