"""The engine: time basis, device facts, ordering and filtering of findings, rule selection."""

from __future__ import annotations

import pytest
from analyzer_docs import BF16_GEMM, MUL, SGEMM, DocBuilder, nat, py

from deepctx.profiles.analyzer import Limits, analyze, rule_ids
from deepctx.profiles.analyzer.device import device_info
from deepctx.profiles.analyzer.index import build_index
from deepctx.profiles.analyzer.timing import merge, overlap, time_basis

MS = 1_000_000
MAIN = [py("main", 10)]


def test_rules_are_listed_in_issue_order() -> None:
    assert rule_ids() == ["host-bound-step", "launch-bound-loop", "sync-in-loop", "blocking-copy", "allocation-churn",
                          "elementwise-chain", "dataloader-main-thread", "fp32-gemm", "small-grid",
                          "collective-not-overlapped", "long-scoreboard", "uncoalesced-access", "bank-conflicts",
                          "warp-divergence", "fp32-fma", "low-occupancy", "unfused-optimizer", "recompiles",
                          "graph-break", "compiled-hot-kernel"]


def test_unknown_rule_is_an_error() -> None:
    with pytest.raises(KeyError, match="no-such-rule"):
        analyze(DocBuilder().doc, rules=["no-such-rule"])


def test_time_basis_counts_cpu_outside_gpu_calls_plus_time_inside_them() -> None:
    b = DocBuilder(duration_s=10.0)
    b.cpu(MAIN + [py("step", 20)], 300)
    b.cpu(MAIN + [py("step", 21)], 100, inside="cudaStreamSynchronize")  # spinning in the wait: API time
    b.sync(MAIN + [py("step", 21)], 10, 120 * MS)
    basis = time_basis(b.doc, build_index(b.doc))
    assert (basis.time_ns, basis.host_ns, basis.main_tid, basis.device.source) == (420 * MS, 420 * MS, 100, "none")
    assert basis.speedup(210 * MS) == 2.0
    assert basis.speedup(10 * 420 * MS) == 20.0  # never more than 95% removable


def test_time_basis_is_capped_by_the_capture_and_raised_by_the_gpu() -> None:
    b = DocBuilder(duration_s=0.2)
    b.cpu(MAIN + [py("step", 20)], 300)
    assert time_basis(b.doc, build_index(b.doc)).time_ns == 200 * MS
    b = DocBuilder(duration_s=10.0)
    b.cpu(MAIN + [py("step", 20)], 100)
    b.launch(MAIN + [py("step", 20)], BF16_GEMM, 10, 1 * MS, 500 * MS)
    basis = time_basis(b.doc, build_index(b.doc))
    assert basis.time_ns == 500 * MS and basis.source.startswith("GPU busy time")


def test_trace_busy_time_counts_overlaps_once() -> None:
    b = DocBuilder()
    b.cpu(MAIN + [py("step", 20)], 1)
    b.trace("kernel", "a", 0, 10, stream=1)
    b.trace("kernel", "b", 5, 10, stream=2)
    b.trace("memcpy", "HtoD", 30, 5, stream=3)
    b.trace("api", "cudaLaunchKernel", 0, 100)
    dev = time_basis(b.doc, build_index(b.doc)).device
    assert (dev.source, dev.busy_ns, dev.intervals) == ("trace", 20, {0: [(0, 15), (30, 35)]})
    assert merge([(5, 6), (0, 2), (1, 3)]) == [(0, 3), (5, 6)]
    assert overlap([(0, 10), (20, 30)], [(5, 25)]) == 10


def test_device_sm_count_from_profile_name_or_default() -> None:
    assert device_info({"device": {"name": "NVIDIA H100 PCIe", "sm_count": 114}}).source == "profile"
    info = device_info({"device": {"name": "NVIDIA H100 PCIe"}})
    assert (info.sm_count, info.source) == (114, "name")
    info = device_info({})
    assert (info.sm_count, info.source, info.assumed) == (132, "default", True)


def test_findings_are_ordered_worst_first_and_filtered() -> None:
    b = DocBuilder()
    b.cpu(MAIN + [py("step", 20)], 100)
    b.launch(MAIN + [py("step", 20)], MUL, 10_000, 50 * MS, operator="mul")  # launch-bound: 5.26x
    b.cpu(MAIN + [py("step", 30)], 10)
    b.launch(MAIN + [py("step", 30)], SGEMM, 50, MS // 2, grid=(16, 32, 1))  # fp32 gemm: not estimated
    a = analyze(b.doc)
    assert [f.rule for f in a.findings] == ["launch-bound-loop", "fp32-gemm"]
    high = analyze(b.doc, Limits(min_speedup=10.0))
    assert [f.rule for f in high.findings] == ["fp32-gemm"]  # no estimate: kept by its own gate
    report = {r.rule: r for r in high.rules}["launch-bound-loop"]
    # T = 110 ms CPU + 50.5 ms launching; R = 130 ms; 160.5 / 30.5 = 5.26
    assert report.status == "clear" and report.reason == ("1 candidate(s) below the 10.0x threshold (best 5.26x at "
                                                          "step (/srv/app/train.py:20))")


def test_a_small_estimated_gain_is_a_lead_not_a_claim() -> None:
    b = DocBuilder()
    b.cpu(MAIN + [py("step", 20)], 100)
    b.launch(MAIN + [py("step", 20)], MUL, 10_000, 50 * MS, operator="mul")  # launch-bound: 7.5x at 0.5
    claims = analyze(b.doc)
    assert [(f.rule, f.estimated_speedup, f.confidence) for f in claims.findings] == [("launch-bound-loop", 7.5, 0.5)]
    leads = analyze(b.doc, Limits(claim_speedup=8.0))
    assert [(f.rule, f.estimated_speedup, f.confidence) for f in leads.findings] == [("launch-bound-loop", 7.5, 0.4)]


def test_worker_thread_work_is_charged_to_the_line_that_handed_it_over() -> None:
    """Launches of PyTorch's autograd threads sit under the backward() line (origin path, op, worker thread)."""
    b = DocBuilder()
    handoff = MAIN + [py("train", 45), {"kind": "op", "name": "[autograd backward]", "file": None, "line": None,
                                        "module": None},
                      {"kind": "thread", "name": "pt_autograd_0", "file": None, "line": None, "module": None, "tid": 7},
                      nat("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
                          "libtorch_cpu.so")]
    b.cpu(MAIN + [py("train", 45)], 50)
    b.launch(handoff, MUL, 5_000, 40 * MS, operator="mul")
    idx = build_index(b.doc)
    [rec] = [r for r in idx.gpu if r.kind == "kernel"]
    assert (rec.ctx.tid, rec.ctx.site.line if rec.ctx.site else None) == (7, 45)
    assert idx.threads[7].api_time_ns == 40 * MS and idx.threads[100].api_time_ns == 0


def waiting_main() -> DocBuilder:
    """The main thread only joins a worker (30 ms on the CPU); the worker launches 10,000 tiny kernels."""
    b = DocBuilder(duration_s=10.0)
    b.cpu(MAIN + [py("join", 50, file="/usr/lib/python3.12/threading.py", module="threading")], 30)
    b.main = [{"kind": "thread", "name": "python3 (work_0)", "file": None, "line": None, "module": None, "tid": 101}]
    loop = [py("work", 30), py("step", 20)]
    b.cpu(loop, 100)
    b.launch(loop, MUL, 10_000, 50 * MS, operator="mul")
    return b


def test_baseline_is_the_critical_thread_when_the_main_thread_waits() -> None:
    doc = waiting_main().doc
    a = analyze(doc, rules=["launch-bound-loop"])
    b = a.basis
    # worker: 100 ms of Python + 50 ms in cudaLaunchKernel; main: 30 ms
    assert (b.critical_tid, b.main_tid, b.time_ns, b.main_ns, b.wall_ns) == (101, 100, 150 * MS, 30 * MS, 10_000 * MS)
    assert b.source == ("critical thread 101 (python3 (work_0)): CPU time outside GPU calls plus the time inside "
                        "them; the main thread 100 was active 30 ms")
    [f] = a.findings_json()
    # R = 10000 x (15 - 2) µs = 130 ms of T = 150 ms: 7.5x; against the main thread's 30 ms it was capped at 20x
    assert f["estimated_speedup"] == 7.5
    assert f["speedup_baseline"] == {"kind": "critical", "time_ns": 150 * MS, "source": b.source}
    an = a.to_json()
    assert (an["critical_tid"], an["main_tid"], an["main_time_ns"], an["wall_time_ns"]) == (101, 100, 30 * MS, 10_000 * MS)
    assert an["rules"][0]["baseline"]["kind"] == "critical"


def test_wall_baseline_is_the_capture_duration() -> None:
    doc = waiting_main().doc
    basis = time_basis(doc, build_index(doc)).for_baseline("wall")
    assert (basis.baseline, basis.time_ns, basis.source) == ("wall", 10_000 * MS, "the capture's wall time (10 s)")
    assert basis.speedup(5_000 * MS) == 2.0


def test_deepctx_agent_threads_are_never_the_critical_thread() -> None:
    b = waiting_main()
    b.main = [{"kind": "thread", "name": "deepctx-cupti", "file": None, "line": None, "module": None, "tid": 102}]
    b.cpu([py("flush", 1, file="/agent", module=None)], 500)
    basis = time_basis(b.doc, build_index(b.doc))
    assert (basis.critical_tid, basis.time_ns) == (101, 150 * MS)  # the worker, not the agent's 500 ms
