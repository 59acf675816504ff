"""Holistic Trace Analysis's kernel breakdown of a deepctx trace export, against deepctx's own totals of the
same capture (used by the GPU test on a fresh capture and by the views tests on a recorded one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profile_paths import walk

from deepctx.cli.formats.chrome import ChromeTrace
from deepctx.profiles.exporter import ExportOptions


def hta_kernel_ns(doc: dict[str, Any], trace_dir: Path) -> float:
    """Kernel time (not copies or sets) in HTA's breakdown of the doc's Chrome/Perfetto export."""
    from hta.trace_analysis import TraceAnalysis

    trace_dir.mkdir(parents=True, exist_ok=True)
    (trace_dir / "rank0.json").write_text(ChromeTrace().export(doc, ExportOptions()))
    _, by_kernel = TraceAnalysis(trace_dir=str(trace_dir)).get_gpu_kernel_breakdown(visualize=False)
    compute = by_kernel[by_kernel["kernel_type"] != "MEMORY"]  # HTA lists copies and sets as kernels too
    return float(compute["sum (us)"].sum()) * 1000


def trace_kernel_ns(doc: dict[str, Any]) -> int:
    """Kernel time in the doc's per-record trace events."""
    return sum(ev["dur_ns"] for ev in doc["trace"] if ev["kind"] == "kernel")


def tree_kernel_ns(doc: dict[str, Any]) -> int:
    """Kernel time in the doc's call-path tree."""
    return sum(n["metrics"].get("gpu_time_ns", 0) for _, n in walk(doc) if n["kind"] == "kernel")
