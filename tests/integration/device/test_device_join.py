"""The real CUPTI agent and the real BPF programs, driven by the mock CUDA/CUPTI libraries: correlation
ids and synthetic activity records with known durations come out as exact GPU times under the API call
path, the kernel and the Python line that launched them."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from capture_util import Result, run_capture
from device_paths import TARGET
from harness import StdinTarget, line_of

from deepctx.daemon.device_tree import UNKNOWN_ORIGIN
from deepctx.daemon.trace import totals_by_kernel
from deepctx.host.frames import Frame
from deepctx.probes.device_activity import DEV_AGENT_ACTIVE, DeviceActivity

sys.path.insert(0, str(TARGET.parent))
import mock_target as mt  # noqa: E402

MATMUL = "mock_matmul(float*, int)"
RELU = "mock_relu(float*)"
GRAPH_MATMUL_NS = mt.N_GRAPH * 2 * mt.MATMUL_NS
GRAPH_RELU_NS = mt.N_GRAPH * mt.RELU_NS
TOTAL_NS = (mt.N_MATMUL * mt.MATMUL_NS + mt.N_RELU * mt.RELU_NS + mt.N_COPY * mt.COPY_BYTES
            + mt.N_SET * mt.SET_BYTES + GRAPH_MATMUL_NS + GRAPH_RELU_NS)
RECORDS = mt.N_MATMUL + mt.N_RELU + mt.N_COPY + mt.N_SET + 3 * mt.N_GRAPH + 1  # + the sync record


def start(built: tuple[Path, Path], *args: str, inject_env: bool = True, **extra_env: str) -> StdinTarget:
    agent, lib = built
    env = dict(os.environ) | extra_env
    if inject_env:
        env["CUDA_INJECTION64_PATH"] = str(agent)
    return StdinTarget([sys.executable, str(TARGET), str(lib), *args], env=env)


def phase(t: StdinTarget) -> Callable[[], None]:
    def work() -> None:
        t.go()
        t.expect("cupti")
        t.expect("done")

    return work


def gpu_time(r: Result, *frames: tuple[str, str]) -> int:
    """Inclusive GPU time of every node whose path holds the given (kind, name) frames in order."""
    total = 0
    for path, v in r.tree.paths_with("gpu_time_ns"):
        it = iter((f.kind, f.name) for f in path)
        if all(any(p == want for p in it) for want in frames):
            total += v
    return total


def at_line(r: Result, line: int, kind: str, name: str) -> int:
    """GPU time of (kind, name) nodes below a Python frame of the target at `line`."""
    total = 0
    for path, v in r.tree.paths_with("gpu_time_ns"):
        on_line = any(f.kind == "python" and (f.file or "").endswith("mock_target.py") and f.line == line
                      for f in path)
        if on_line and path[-1].kind == kind and path[-1].name == name:
            total += v
    return total


@pytest.fixture(scope="module")
def exact(built: tuple[Path, Path]) -> Result:
    t = start(built)
    try:
        return run_capture(t.pid, phase(t), DeviceActivity())
    finally:
        t.stop()


def test_gpu_time_per_api_and_kernel_is_exact(exact: Result) -> None:
    assert gpu_time(exact, ("api", "cudaLaunchKernel"), ("kernel", MATMUL)) == mt.N_MATMUL * mt.MATMUL_NS
    assert gpu_time(exact, ("api", "cuLaunchKernel"), ("kernel", RELU)) == mt.N_RELU * mt.RELU_NS
    assert gpu_time(exact, ("api", "cudaMemcpy"), ("memcpy", "HtoD")) == mt.N_COPY * mt.COPY_BYTES
    assert gpu_time(exact, ("api", "cudaMemset"), ("memset", "memset")) == mt.N_SET * mt.SET_BYTES
    # one graph launch, one correlation id, a record per node: each node's kernel below the graph
    assert gpu_time(exact, ("api", "cudaGraphLaunch"), ("kernel", MATMUL)) == GRAPH_MATMUL_NS
    assert gpu_time(exact, ("api", "cudaGraphLaunch"), ("kernel", RELU)) == GRAPH_RELU_NS
    assert exact.tree.total("gpu_time_ns") == TOTAL_NS


def test_gpu_time_per_python_line_is_exact(exact: Result) -> None:
    def line(marker: str) -> int:
        return line_of(TARGET, marker)

    assert at_line(exact, line("LINE_MATMUL"), "kernel", MATMUL) == mt.N_MATMUL * mt.MATMUL_NS
    assert at_line(exact, line("LINE_RELU"), "kernel", RELU) == mt.N_RELU * mt.RELU_NS
    assert at_line(exact, line("LINE_COPY"), "memcpy", "HtoD") == mt.N_COPY * mt.COPY_BYTES
    assert at_line(exact, line("LINE_SET"), "memset", "memset") == mt.N_SET * mt.SET_BYTES
    assert at_line(exact, line("LINE_GRAPH"), "kernel", MATMUL) == GRAPH_MATMUL_NS
    assert at_line(exact, line("LINE_GRAPH"), "kernel", RELU) == GRAPH_RELU_NS


def test_cupti_names_the_kernel_the_api_probes_could_not(exact: Result) -> None:
    """cuLaunchKernel on a bare handle: no symbol, no string next to it. CUPTI's name goes on the node
    that counts the launches, so calls and GPU time meet on one node."""
    nodes = [n for n in exact.tree.nodes if n.frame.kind == "kernel" and n.frame.name == RELU
             and exact.tree.nodes[n.parent].frame.name == "cuLaunchKernel"]
    assert len(nodes) == 1
    assert nodes[0].metrics["calls"] == mt.N_RELU
    assert nodes[0].metrics["gpu_time_ns"] == mt.N_RELU * mt.RELU_NS
    assert nodes[0].frame.launch == (8, 1, 1, 128, 1, 1, 0)
    assert not [n for n in exact.tree.nodes if n.frame.name == "[unnamed kernel]"]


def test_every_record_is_accounted_for(exact: Result) -> None:
    s = exact.stats
    assert exact.flushed
    assert s["device_records"] == RECORDS
    assert s["device_records_unknown_correlation"] == 0
    assert s["device_records_before_capture"] == 0
    assert s["device_records_dropped_map_full"] == 0
    assert s["device_time_ns"] == TOTAL_NS == s["device_time_in_profile_ns"]
    assert s["device_sync_records"] == 1
    # runtime launches announce the runtime's id and the driver's (mock: they differ), the rest one each
    assert s["device_correlations"] == 2 * mt.N_MATMUL + mt.N_RELU + mt.N_COPY + mt.N_SET + mt.N_GRAPH + 1
    assert s["device_correlations_outside_probed_calls"] == 0
    assert s["device_agent_flushes"] >= 1


def test_unknown_correlations_are_counted_not_dropped(built: tuple[Path, Path]) -> None:
    """Records whose launch was not seen (here: the join table emptied before the flush) keep their
    GPU time, apart, and are counted."""
    t = start(built)
    try:
        dev = DeviceActivity()
        r = run_capture(t.pid, phase(t), dev, python=False, before_flush=lambda bpf: bpf[b"dev_corr"].clear())
    finally:
        t.stop()
    assert r.stats["device_records_unknown_correlation"] == RECORDS
    unknown = sum(v for path, v in r.tree.paths_with("gpu_time_ns") if path[0] == UNKNOWN_ORIGIN)
    assert unknown == TOTAL_NS == r.stats["device_time_unknown_launch_ns"]
    assert r.tree.nodes[r.tree.node_for([UNKNOWN_ORIGIN, Frame("kernel", RELU)])].metrics["gpu_time_ns"] == \
        mt.N_RELU * mt.RELU_NS + GRAPH_RELU_NS


@pytest.mark.parametrize("clock", ["callback", "offset"])
def test_trace_mode_links_each_launch_to_its_kernel(built: tuple[Path, Path], clock: str) -> None:
    """On one clock: CUPTI's timestamps come from the agent's timestamp callback (CLOCK_MONOTONIC), or
    (DEEPCTX_TIMESTAMP_CB=0) from CUPTI's own clock, the mock's CLOCK_REALTIME, converted with the offset the
    agent measures: each record starts after its call began, and within a second of it."""
    t = start(built, **({"DEEPCTX_TIMESTAMP_CB": "0"} if clock == "offset" else {}))
    try:
        r = run_capture(t.pid, phase(t), DeviceActivity(trace=True), python=False)
    finally:
        t.stop()
    apis = {e["correlation"]: e for e in r.trace if e["kind"] == "api"}
    work = [e for e in r.trace if e["kind"] != "api"]
    assert sorted(e["kind"] for e in work).count("kernel") == mt.N_MATMUL + mt.N_RELU + 3 * mt.N_GRAPH
    assert len(work) == RECORDS
    for e in work:
        launch = apis[e["correlation"]]  # every record's call is in the trace
        assert launch["start_ns"] <= e["start_ns"] < launch["start_ns"] + 1_000_000_000, (launch, e)
        assert launch["tid"] == e["tid"] == t.pid
    assert totals_by_kernel(r.trace) == {MATMUL: mt.N_MATMUL * mt.MATMUL_NS + GRAPH_MATMUL_NS,
                                         RELU: mt.N_RELU * mt.RELU_NS + GRAPH_RELU_NS}
    names = {e["name"] for e in apis.values()}
    assert names == {"cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpy", "cudaMemset", "cudaGraphLaunch",
                     "cudaDeviceSynchronize"}
    copies = [e for e in work if e["kind"] == "memcpy"]
    assert [(e["name"], e["bytes"], e["dur_ns"]) for e in copies] == [("Memcpy HtoD", mt.COPY_BYTES,
                                                                       mt.COPY_BYTES)] * mt.N_COPY
    assert r.stats["device_trace_events_lost"] == 0
    # the agent said it started: its status probe's site was known before the handlers went on
    assert r.stats["device_agent_status"] == DEV_AGENT_ACTIVE


def test_an_agent_nobody_watches_holds_nothing(built: tuple[Path, Path]) -> None:
    """Loaded at cuInit, no deepctxd: CUPTI is not subscribed (other tools can have it) and not a single
    callback runs in the application's calls."""
    t = start(built)
    try:
        t.go()
        assert t.expect("cupti").split()[1:] == ["0", "0", "0"]  # nor finalized
        t.expect("done")
    finally:
        t.stop()


@pytest.mark.parametrize("rings", [{"corr_entries": 8}, {"corr_ids": 8}], ids=["8 call slots", "8 id entries"])
def test_a_correlation_slot_taken_again_before_its_record_is_counted(built: tuple[Path, Path], rings: dict) -> None:
    """The join table's rings (a slot per call reported, an entry per correlation id), one made 8 long: the
    calls of one phase (more than 8, their records delivered at the flush) take its places again while
    they hold a young call nothing has joined yet. Each such take is counted as a dropped correlation,
    and the records of the calls that lost their place count as of unknown correlation, their GPU time
    kept apart."""
    t = start(built)
    try:
        r = run_capture(t.pid, phase(t), DeviceActivity(**rings), python=False)
    finally:
        t.stop()
    s = r.stats
    ids = s["device_correlations"]
    assert ids == 2 * mt.N_MATMUL + mt.N_RELU + mt.N_COPY + mt.N_SET + mt.N_GRAPH + 1
    assert s["device_correlations_dropped"] == ids - 8
    assert 0 < s["device_records_unknown_correlation"] < RECORDS
    assert s["device_time_ns"] == TOTAL_NS  # every record's time is kept, joined or not
    with pytest.raises(ValueError, match="power of two"):
        DeviceActivity(corr_ids=6)


@pytest.mark.parametrize("spans", ["off", "on", "stale"])
def test_records_widen_the_span_only_under_a_duty_cycle(built: tuple[Path, Path], spans: str) -> None:
    """dev_span costs a map lookup per record: only captures on a duty cycle (DeviceActivity.spans) pay it.
    With it, every record but the sync's widens the span and adds its time; taking it starts a new one.
    Records of work that started before the share (stale: here, a share said to start far ahead) are counted
    apart and widen nothing."""
    t = start(built)
    taken: list = []
    try:
        dev = DeviceActivity()
        dev.spans = spans != "off"
        if spans == "stale":
            dev.share_from_ns = 1 << 62
        # read after the flush, as the duty cycle reads it at the end of each attached share
        run_capture(t.pid, phase(t), dev, python=False, after_flush=lambda bpf: taken.extend(
            [dev.take_span(bpf), dev.take_span(bpf)]))
    finally:
        t.stop()
    first, again = taken
    assert (again.records, again.first_start_ns, again.last_end_ns, again.device_ns, again.stale) == (0, 0, 0, 0, 0)
    if spans == "off":
        assert (first.records, first.first_start_ns, first.device_ns, first.stale) == (0, 0, 0, 0)
        return
    if spans == "stale":
        assert (first.records, first.first_start_ns, first.last_end_ns, first.device_ns) == (0, 0, 0, 0)
        assert (first.stale, first.stale_ns) == (RECORDS - 1, TOTAL_NS)
        return
    assert (first.records, first.device_ns, first.stale, first.stale_ns) == (RECORDS - 1, TOTAL_NS, 0, 0)
    # the phase's device work: at least its kernels, copies and sets back to back
    assert first.last_end_ns - first.first_start_ns >= TOTAL_NS
