"""The analyzer on profiles recorded on an H200 (tests/fixtures/profiles): exact findings, and rules that need
device activity say they were not evaluated (the fixtures have no gpu_time_ns) instead of guessing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deepctx.profiles.analyzer import Limits, analyze, annotate, rule_ids

TORCH_OPS = "/work/main/tests/gpu/targets/torch_ops.py"


def by_rule(a: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for f in a.findings:
        out.setdefault(f.rule, []).append(f.to_json())
    return out


def test_torch_ops_findings(torch_ops: dict[str, Any]) -> None:
    a = analyze(torch_ops)
    assert [(f.rule, f.site.line if f.site else None) for f in a.findings] == [("launch-bound-loop", 19), ("fp32-gemm", 26)]
    launch, gemm = a.findings_json()
    assert launch["location"] == {"file": TORCH_OPS, "line": 19, "function": "multiply"}
    assert launch["call_path"] == [f"<module> ({TORCH_OPS}:53)", f"main ({TORCH_OPS}:44)", f"multiply ({TORCH_OPS}:19)"]
    ev = launch["evidence"]
    # 1000 launches of y = x * 2 (grid 1x1x1), 8.30 ms inside cudaLaunchKernel and no CPU sample at the line
    assert (ev["launches"], ev["host_time_ns"], ev["host_per_launch_ns"], ev["largest_grid_blocks"]) == (1000, 8_304_004, 8304, 1)
    assert ev["kernels"] == [{"kernel": "at::native::vectorized_elementwise_kernel", "launches": 1000}]
    # T = 18 samples at 99 Hz outside GPU calls + 63.67 ms inside them; R = 1000 x (8.304 - 2) µs
    assert a.basis.time_ns == 245_487_699
    assert launch["estimated_speedup"] == round(245_487_699 / (245_487_699 - 1000 * (8304.004 - 2000)), 2) == 1.03
    assert gemm["location"]["line"] == 26 and gemm["evidence"]["launches"] == 20
    assert gemm["evidence"]["kernels"][0]["kernel"].startswith("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8")
    assert gemm["estimated_speedup"] is None and gemm["confidence"] == 0.4


def test_torch_ops_item_loop_is_below_the_threshold(torch_ops: dict[str, Any]) -> None:
    report = {r.rule: r for r in analyze(torch_ops).rules}["sync-in-loop"]
    assert report.status == "clear"
    assert report.reason == (f"1 candidate(s) below the 1.02x threshold (best 1.0x at read_scalars ({TORCH_OPS}:33))")
    [item] = by_rule(analyze(torch_ops, Limits(min_speedup=1.0)))["sync-in-loop"]
    ev = item["evidence"]
    # 50 x (x.sum()).item(): a 4-byte DtoH copy and a cudaStreamSynchronize each
    assert (ev["syncs"], ev["sync_wait_ns"], ev["reads_to_host"], ev["bytes_read"]) == (50, 255_647, 50, 200)
    assert ev["overlappable_host_ns"] == 0  # nothing else for the host to do: removing the reads gains nothing


def test_triton_and_jax_fixtures_have_no_findings(triton_kernel: dict[str, Any], jax_jit: dict[str, Any]) -> None:
    # Triton: 100 launches of a custom kernel (grid 1024) and its JIT compile: nothing the API data can blame.
    # JAX: compile-time autotuning (pinned host churn, timing kernels) is not steady state.
    assert analyze(triton_kernel).findings == []
    assert analyze(jax_jit).findings == []
    assert analyze(jax_jit, Limits(min_speedup=1.0)).findings == []


def test_rules_needing_device_activity_are_not_evaluated(torch_ops: dict[str, Any], jax_jit: dict[str, Any]) -> None:
    for doc in (torch_ops, jax_jit):
        reports = {r.rule: r for r in analyze(doc).rules}
        assert list(reports) == rule_ids()
        assert reports["host-bound-step"].status == "not_evaluated"
        assert reports["collective-not-overlapped"].status == "clear"  # no collective calls at all


def test_annotate_writes_findings_and_analysis_as_json(torch_ops: dict[str, Any]) -> None:
    doc = json.loads(json.dumps(torch_ops))
    annotate(doc)
    assert [f["rule"] for f in doc["findings"]] == ["launch-bound-loop", "fp32-gemm"]
    assert set(doc["findings"][0]) == {"rule", "title", "location", "call_path", "evidence", "suggestion",
                                       "estimated_speedup", "speedup_model", "speedup_baseline", "confidence"}
    assert doc["findings"][0]["speedup_baseline"] == {
        "kind": "critical", "time_ns": 245_487_699,
        "source": "main thread 604: CPU time outside GPU calls plus the time inside them"}
    an = doc["analysis"]
    assert an["analyzer"] == "deepctx.analyzer/1" and an["time_ns"] == 245_487_699 and an["main_tid"] == 604
    assert an["device_time"] == {"source": "none", "busy_ns": 0, "gpu_time_ns": 0}
    assert an["device"] == {"name": None, "sm_count": 132, "source": "default"}
    assert [r["status"] for r in an["rules"]] == ["not_evaluated", "fired", "clear", "clear", "clear", "clear",
                                                  "clear", "fired", "clear", "clear"] + ["not_evaluated"] * 6 + [
                                                  "clear"] + ["not_evaluated"] * 3
    # no PC samples; no optimizer step; not compiled (no trace's compiles) and no device time
    json.dumps(doc)  # every value serializes


# The parts the analyzer adds to the document, as proposed for docs/profile.schema.json.
FINDING_SCHEMA = {
    "type": "object",
    "required": ["rule", "title", "location", "evidence", "suggestion", "estimated_speedup", "confidence"],
    "properties": {
        "rule": {"type": "string"}, "title": {"type": "string"},
        "location": {"type": "object", "required": ["file", "line", "function"],
                     "properties": {"file": {"type": ["string", "null"]}, "line": {"type": ["integer", "null"]},
                                    "function": {"type": ["string", "null"]}}},
        "call_path": {"type": "array", "items": {"type": "string"}},
        "evidence": {"type": "object"}, "suggestion": {"type": "string"},
        "estimated_speedup": {"type": ["number", "null"], "minimum": 1},
        "speedup_model": {"type": "string"},
        "confidence": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
    },
}
DEVICE_SCHEMA = {"type": "object", "properties": {"name": {"type": ["string", "null"]},
                                                  "sm_count": {"type": "integer", "minimum": 1}}}


def test_findings_match_the_documented_shape(torch_ops: dict[str, Any]) -> None:
    import jsonschema

    doc = json.loads(json.dumps(torch_ops))
    doc["device"] = {"name": "NVIDIA H200", "sm_count": 132}
    jsonschema.validate(doc["device"], DEVICE_SCHEMA)
    annotate(doc, Limits(min_speedup=1.0))
    assert len(doc["findings"]) == 3
    for f in doc["findings"]:
        jsonschema.validate(f, FINDING_SCHEMA)
    assert doc["analysis"]["device"] == {"name": "NVIDIA H200", "sm_count": 132, "source": "profile"}
    schema = json.loads((Path(__file__).resolve().parents[3] / "docs" / "profile.schema.json").read_text())
    jsonschema.validate(doc, schema)  # the added parts are optional fields the schema already admits
