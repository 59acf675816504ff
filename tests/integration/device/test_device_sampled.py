"""Launches left to the CUPTI agent (sampled mode's default with the agent there): no uprobe traps
cudaLaunchKernel / cuLaunchKernel; the agent announces a sample of the calls (each thread's first after
every DEEPCTX_SAMPLE_US) and every record carries the announced call that stands for its own. The real
agent, the real BPF programs and the mock CUDA/CUPTI libraries."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from capture_util import Result, run_capture
from device_paths import TARGET
from harness import StdinTarget, line_of
from test_device_join import MATMUL, RECORDS, RELU, TOTAL_NS, at_line, gpu_time, phase

from deepctx.probes.device_activity import DeviceActivity

sys.path.insert(0, str(TARGET.parent))
import mock_target as mt  # noqa: E402


def sampled_capture(built: tuple[Path, Path], interval_us: int, *args: str) -> Result:
    agent, lib = built
    env = dict(os.environ) | {"CUDA_INJECTION64_PATH": str(agent), "DEEPCTX_SAMPLE_US": str(interval_us)}
    t = StdinTarget([sys.executable, str(TARGET), str(lib), *args], env=env)
    try:
        return run_capture(t.pid, phase(t), DeviceActivity(sampling=True), gpu_mode="sampled", agent_calls=True)
    finally:
        t.stop()


@pytest.fixture(scope="module")
def every_call(built: tuple[Path, Path]) -> Result:
    """Interval 0: every call is announced, so the sampling path must give the exact answer."""
    return sampled_capture(built, 0)


@pytest.fixture(scope="module")
def first_call_only(built: tuple[Path, Path]) -> Result:
    """Interval 10 s: only the thread's first call (a matmul launch) is announced."""
    return sampled_capture(built, 10_000_000)


SPIN_NS = 200_000  # MOCK_LAUNCH_SPIN_NS: each cuLaunchKernel's CPU time between its callbacks, at least


def api_time(r: Result, kernel: str) -> int:
    """api_time_ns of the kernel's nodes (below its launch API)."""
    return sum(n.metrics.get("api_time_ns", 0) for n in r.tree.nodes if n.frame.kind == "kernel"
               and n.frame.name == kernel)


def kernel_node(r: Result, api: str, kernel: str) -> dict[str, int]:
    nodes = [n for n in r.tree.nodes if n.frame.kind == "kernel" and n.frame.name == kernel
             and r.tree.nodes[n.parent].frame.name == api]
    assert len(nodes) == 1, [(r.tree.nodes[n.parent].frame.name, n.frame) for n in nodes]
    return {"calls": nodes[0].metrics["calls"], "gpu_time_ns": nodes[0].metrics["gpu_time_ns"],
            "launch": nodes[0].frame.launch}  # type: ignore[dict-item]


def test_reported_launches_have_exact_calls_time_and_shape(every_call: Result) -> None:
    """The agent's records give what the uprobes no longer read: the count, CUPTI's kernel name and the
    launch shape, on the node the probes would have made (calls counted once, not by both)."""
    assert kernel_node(every_call, "cudaLaunchKernel", MATMUL) == {
        "calls": mt.N_MATMUL, "gpu_time_ns": mt.N_MATMUL * mt.MATMUL_NS, "launch": (4, 2, 1, 256, 1, 1, 0)}
    assert kernel_node(every_call, "cuLaunchKernel", RELU) == {
        "calls": mt.N_RELU, "gpu_time_ns": mt.N_RELU * mt.RELU_NS, "launch": (8, 1, 1, 128, 1, 1, 0)}
    assert every_call.stats["device_calls_reported_by_agent"] == mt.N_MATMUL + mt.N_RELU
    # sampled: the agent times no call (the uprobes' sampled mode has no return probe either)
    assert api_time(every_call, MATMUL) == api_time(every_call, RELU) == 0
    assert every_call.stats["gpu_api_calls"] == mt.N_COPY + mt.N_SET + mt.N_GRAPH + 1  # the rest: uprobes


def test_every_call_announced_is_exact_per_line(every_call: Result) -> None:
    def line(marker: str) -> int:
        return line_of(TARGET, marker)

    assert at_line(every_call, line("LINE_MATMUL"), "kernel", MATMUL) == mt.N_MATMUL * mt.MATMUL_NS
    assert at_line(every_call, line("LINE_RELU"), "kernel", RELU) == mt.N_RELU * mt.RELU_NS
    assert gpu_time(every_call, ("api", "cudaMemcpy"), ("memcpy", "HtoD")) == mt.N_COPY * mt.COPY_BYTES
    assert every_call.tree.total("gpu_time_ns") == TOTAL_NS
    s = every_call.stats
    assert s["device_records"] == RECORDS and s["device_records_unknown_correlation"] == 0
    # one announcement per call: the runtime launch's own driver call (an id of its own in the mock) is not
    assert s["device_correlations"] == mt.N_MATMUL + mt.N_RELU + mt.N_COPY + mt.N_SET + mt.N_GRAPH + 1
    # each matmul's kernel carries the driver call's id, which stands for the runtime call announced
    assert s["device_records_charged_to_a_sampled_call"] == mt.N_MATMUL


def test_one_announcement_stands_for_the_calls_after_it(first_call_only: Result) -> None:
    """Nothing is lost between samples: every record is charged to the announced call (the first
    matmul's line), and the device total stays exact."""
    s = first_call_only.stats
    assert s["device_correlations"] == 1
    assert s["device_records"] == RECORDS
    assert s["device_records_unknown_correlation"] == 0
    # all: even the first matmul's kernel carries its driver call's id (the mock's), not the announced one
    assert s["device_records_charged_to_a_sampled_call"] == RECORDS
    assert first_call_only.tree.total("gpu_time_ns") == TOTAL_NS == s["device_time_in_profile_ns"]
    line = line_of(TARGET, "LINE_MATMUL")
    assert at_line(first_call_only, line, "kernel", RELU) == mt.N_RELU * mt.RELU_NS + mt.N_GRAPH * mt.RELU_NS
    # a copy charged to a launch's path is not shown as made by the launch
    assert gpu_time(first_call_only, ("api", "[CUDA call]"), ("memcpy", "HtoD")) == mt.N_COPY * mt.COPY_BYTES
    assert gpu_time(first_call_only, ("api", "cudaLaunchKernel"), ("memcpy", "HtoD")) == 0


def test_each_thread_is_sampled_on_its_own(built: tuple[Path, Path]) -> None:
    """The relus run in a second thread: its first call is announced too, and its records go to its own
    call path, not to the main thread's last announced call (the matmul line). (The thread lives a few
    milliseconds: the Python walker may not know it yet, so its path can stop at native frames.)"""
    r = sampled_capture(built, 10_000_000, "--relu-thread")
    assert r.stats["device_correlations"] == 2
    assert r.stats["device_records_unknown_correlation"] == 0
    relu_threads = {path[0].tid for path, _ in r.tree.paths_with("gpu_time_ns") if path[-1].name == RELU}
    matmul_threads = {path[0].tid for path, _ in r.tree.paths_with("gpu_time_ns") if path[-1].name == MATMUL}
    assert len(relu_threads) == 2 and len(matmul_threads) == 1  # the graph's relus run on the main thread
    other = (relu_threads - matmul_threads).pop()
    assert sum(v for path, v in r.tree.paths_with("gpu_time_ns") if path[0].tid == other) == mt.N_RELU * mt.RELU_NS
    assert kernel_node(r, "cuLaunchKernel", RELU)["calls"] == mt.N_RELU
    # the graphs' kernels, charged to the matmul launch that stands for them, are not counted as its launches
    assert kernel_node(r, "cudaLaunchKernel", MATMUL)["calls"] == mt.N_MATMUL
    # the main thread's later work (copies, sets, graphs) stays with its own announced call
    assert at_line(r, line_of(TARGET, "LINE_MATMUL"), "kernel", RELU) == mt.N_GRAPH * mt.RELU_NS
    assert r.tree.total("gpu_time_ns") == TOTAL_NS


def test_exact_mode_can_leave_launches_to_the_agent(built: tuple[Path, Path]) -> None:
    """agent_calls = "on" in exact mode: every launch announced and its path taken in the agent's probe,
    no uprobe on it; lines, counts and device totals exact."""
    agent, lib = built
    env = dict(os.environ, CUDA_INJECTION64_PATH=str(agent), MOCK_LAUNCH_SPIN_NS=str(SPIN_NS))
    t = StdinTarget([sys.executable, str(TARGET), str(lib)], env=env)
    try:
        r = run_capture(t.pid, phase(t), DeviceActivity(), gpu_mode="exact", agent_calls=True)
    finally:
        t.stop()
    # the agent timed each launch between its callbacks, as the uprobes' return probe would have: at least
    # the mock's spin per call, and not far over it
    for kernel, n in ((MATMUL, mt.N_MATMUL), (RELU, mt.N_RELU)):
        api_ns = api_time(r, kernel)
        assert n * SPIN_NS <= api_ns < n * SPIN_NS + 500_000_000, (kernel, api_ns)
    s = r.stats
    assert s["device_records"] == RECORDS and s["device_records_unknown_correlation"] == 0
    assert s["device_records_charged_to_a_sampled_call"] == 0
    assert s["device_calls_reported_by_agent"] == mt.N_MATMUL + mt.N_RELU
    assert s["gpu_api_calls"] == mt.N_COPY + mt.N_SET + mt.N_GRAPH + 1  # the uprobes: everything else
    assert at_line(r, line_of(TARGET, "LINE_MATMUL"), "kernel", MATMUL) == mt.N_MATMUL * mt.MATMUL_NS
    assert at_line(r, line_of(TARGET, "LINE_RELU"), "kernel", RELU) == mt.N_RELU * mt.RELU_NS
    assert r.tree.total("gpu_time_ns") == TOTAL_NS
