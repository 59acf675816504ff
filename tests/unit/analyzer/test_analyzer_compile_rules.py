"""Rules 18-20 over torch.compile's context (issue 33.4): recompiles, graph breaks and a compiled kernel that
dominates GPU time, on synthetic profiles with the `compiles` part and kernels' `compiled_from` as the daemon
writes them (tests/integration/test_compiled_code.py checks that it does)."""

from __future__ import annotations

from typing import Any

import pytest
from analyzer_docs import MUL, TRAIN, DocBuilder, frame, lib, py
from test_analyzer_rules import MAIN, MS, at, findings, status

WRAPPER = "/tmp/torchinductor_u/ab/c" + "x" * 51 + ".py"
MODEL = "/srv/app/model.py"
START = 1_796_000_000.0  # DocBuilder's started_unix


def compile_entry(cid: str, reason: str | None = None, time_s: float = 2.0, start: float | None = START + 1,
                  breaks: list[dict[str, Any]] | None = None, function: str = "forward") -> dict[str, Any]:
    return {"id": cid, "function": function, "file": MODEL, "line": 40, "recompile_reason": reason,
            "fail_reason": None, "graph_breaks": breaks or [], "time_s": time_s, "ops": 7, "start_unix": start,
            "called_from": {"file": TRAIN, "line": 25, "function": "train", "code": None}}


def compiled(n_recompiles: int, time_s: float = 2.0, start: float | None = START + 1) -> dict[str, Any]:
    """A 10 s capture of a compiled model called from train.py:25, recompiled n times."""
    b = DocBuilder()
    b.cpu(MAIN + [py("train", 25)], 100)
    b.doc["compiles"] = [compile_entry("0/0", start=START - 60)] + [
        compile_entry(f"0/{i}", "0/0: tensor 'x' size mismatch at index 0. expected 64, actual 96", time_s, start)
        for i in range(1, n_recompiles + 1)]
    return b.doc


def test_recompiles_in_the_capture_point_at_the_calling_line_with_the_guard() -> None:
    [f] = findings(compiled(3), "recompiles")
    assert at(f) == (TRAIN, 25, "train")
    ev = f["evidence"]
    assert (ev["recompiles"], ev["compile_time_s"], ev["compile_ids"]) == (3, 6.0, ["0/1", "0/2", "0/3"])
    assert ev["reasons"] == ["0/0: tensor 'x' size mismatch at index 0. expected 64, actual 96"]
    assert "mark_dynamic" in f["suggestion"] and "dynamic=True" in f["suggestion"]
    # T = the capture's 10 s; R = 6 s of recompiles
    assert f["estimated_speedup"] == pytest.approx(10 / (10 - 6), abs=0.01) and f["confidence"] == 0.7


def test_recompiles_quiet_without_recompiles_in_the_capture() -> None:
    assert findings(compiled(0), "recompiles") == []
    assert findings(compiled(2, start=START - 30), "recompiles") == []  # before the capture began
    no_trace = DocBuilder().doc
    assert status(no_trace, "recompiles")[0] == "not_evaluated" and "TORCH_TRACE" in status(no_trace, "recompiles")[1]


def broken(eager_launches: int) -> dict[str, Any]:
    """forward broken at model.py:44: its resume function launches kernels eagerly at model.py:46."""
    b = DocBuilder()
    brk = {"file": MODEL, "line": 44, "reason": "Dynamo does not know how to trace builtin operator `print`"}
    b.doc["compiles"] = [compile_entry("0/0", breaks=[brk]),
                         compile_entry("1/0", function="torch_dynamo_resume_in_forward_at_44")]
    call = MAIN + [py("train", 25)]
    resume = call + [py("MLP.torch_dynamo_resume_in_forward_at_44", 46, MODEL, "model")]
    b.cpu(resume, 200)  # 200 ms at the resumed lines, in Python
    if eager_launches:
        b.launch(resume, MUL, eager_launches, eager_launches * 10_000, operator="mul")
    b.launch(call + [lib("Runner.call", 12, "x.py") | {"file": WRAPPER}], MUL, 1000, 10 * MS)  # compiled: not counted
    b.cpu(call, 600)
    return b.doc


def test_graph_break_points_at_its_line_and_counts_what_runs_eagerly() -> None:
    [f] = findings(broken(1000), "graph-break")
    assert at(f) == (MODEL, 44, "forward")
    ev = f["evidence"]
    assert ev["reason"].startswith("Dynamo does not know how to trace builtin operator `print`")
    assert (ev["eager_cpu_ns"], ev["eager_launches"], ev["eager_launch_api_ns"]) == (200 * MS, 1000, 10 * MS)
    assert ev["called_at"] == f"train ({TRAIN}:25)"
    assert f["estimated_speedup"] is not None and f["estimated_speedup"] > 1.2
    quiet = broken(0)
    quiet_f = findings(quiet, "graph-break")
    assert quiet_f and quiet_f[0]["evidence"]["eager_launches"] == 0


def hot(share: float, framework: str = "inductor", bytes_per_launch: int | None = None,
        bandwidth_gb_s: float | None = None, scale: int = 1) -> dict[str, Any]:
    """100 launches of a compiled kernel with `share` of 100 x `scale` ms of kernel time, in a 10 s capture."""
    b = DocBuilder()
    cf = {"lines": [{"file": MODEL, "line": 41, "function": "forward", "code": "x = self.fc1(x)"},
                    {"file": MODEL, "line": 42, "function": "forward", "code": None}],
          "nodes": ["x", "relu"], "aten": ["aten.addmm", "aten.relu"] if framework == "inductor" else [],
          "compile_id": "0/0", "output_code": WRAPPER, "framework": framework, "bytes_per_launch": bytes_per_launch}
    if bandwidth_gb_s is not None:
        b.doc["device"] = {"name": None, "memory_bandwidth_gb_s": bandwidth_gb_s}
    at_wrapper = MAIN + [py("train", 25), frame("python", "Runner.call", WRAPPER, 233)]
    b.add(b.main + at_wrapper + [frame("api", "cuLaunchKernelEx", module="libcuda.so.1"),
                                 frame("kernel", "triton_poi_fused_addmm_relu_0", compiled_from=cf)],
          calls=100, api_time_ns=MS, gpu_time_ns=int(share * 100 * MS * scale))
    b.launch(MAIN + [py("train", 30)], MUL, 100, MS, gpu_time_ns=int((1 - share) * 100 * MS * scale))
    return b.doc


def test_a_compiled_kernel_that_dominates_gpu_time_leads_to_its_lines() -> None:
    [f] = findings(hot(0.6), "compiled-hot-kernel")
    assert at(f) == (MODEL, 41, "forward")
    assert f["title"] == "triton_poi_fused_addmm_relu_0 (60% of kernel time) came from model.py:41, 42"
    assert f["estimated_speedup"] is None and f["confidence"] == 0.3
    assert f["evidence"]["aten"] == ["aten.addmm", "aten.relu"]
    assert findings(hot(0.2), "compiled-hot-kernel") == []
    assert "max-autotune-no-cudagraphs" in f["suggestion"]
    [x] = findings(hot(0.6, "xla"), "compiled-hot-kernel")  # a JAX fusion: its operations, XLA's autotuning
    assert "runs x, relu of model.py:41, 42" in x["suggestion"] and "xla_gpu_autotune_level" in x["suggestion"]


def test_a_hot_kernel_far_from_its_memory_floor_is_estimated_by_the_time_above_it() -> None:
    """100 launches of 60 ms (6 s of the 10 s capture's GPU time), each moving at least 108 GB, on a memory of
    4,000 GB/s: the floor is 108 GB at 0.9 x 4,000 GB/s = 30 ms a launch, so 3 s of the 6 could go (10 s / 7 s);
    the kernel moves its bytes at 45% of the peak."""
    [f] = findings(hot(0.6, bytes_per_launch=108_000_000_000, bandwidth_gb_s=4000.0, scale=100), "compiled-hot-kernel")
    ev = f["evidence"]
    assert (ev["floor_ns"], ev["removable_ns"]) == (3_000_000_000, 3_000_000_000)
    assert (ev["share_of_peak"], ev["achieved_gb_s"], ev["peak_gb_s"], ev["bytes_per_launch"]) == (
        0.45, 1800.0, 4000.0, 108_000_000_000)
    assert f["estimated_speedup"] == 1.43  # 10 s / (10 s - 3 s)
    assert f["title"].endswith("model.py:41, 42, at 45% of the memory's peak bandwidth")
    assert "max-autotune-no-cudagraphs" in f["suggestion"] and "--pc-sampling --kernel 'triton_poi_fused_addmm_relu_0'" in f["suggestion"]
    assert f["confidence"] == 0.4 and f["speedup_model"].startswith("memory floor")


def test_a_hot_kernel_at_its_memory_floor_gains_nothing_from_tuning() -> None:
    """60 ms a launch moving 200 GB on 4,000 GB/s: 83% of the peak, past 0.9 x 0.9 of it; its floor (55.6 ms) leaves
    0.44 s of the 6 s to remove (10 s / 9.56 s), and the advice is fewer bytes."""
    [f] = findings(hot(0.6, bytes_per_launch=200_000_000_000, bandwidth_gb_s=4000.0, scale=100), "compiled-hot-kernel")
    assert f["evidence"]["share_of_peak"] == 0.833 and f["evidence"]["removable_ns"] == 444_444_444
    assert f["estimated_speedup"] == 1.05
    assert "only fewer bytes" in f["suggestion"] and "max-autotune" not in f["suggestion"]


def test_a_hot_kernel_without_its_bytes_or_the_bandwidth_stays_a_lead() -> None:
    for doc in (hot(0.6, bytes_per_launch=108_000_000_000, scale=100), hot(0.6, bandwidth_gb_s=4000.0, scale=100)):
        [f] = findings(doc, "compiled-hot-kernel")
        assert f["estimated_speedup"] is None and "floor_ns" not in f["evidence"] and f["confidence"] == 0.3
