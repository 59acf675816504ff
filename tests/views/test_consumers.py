"""Exports read back by the real consumers: llnl-hatchet, Holistic Trace Analysis, Go's pprof."""

from __future__ import annotations

import gzip
import json
import lzma
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import recorded
from hta_check import hta_kernel_ns, trace_kernel_ns, tree_kernel_ns
from synth import trace_events

from deepctx.cli.formats.chrome import ChromeTrace
from deepctx.cli.formats.hatchet import HatchetLiteral
from deepctx.cli.views.flat import flat, sorted_rows
from deepctx.profiles.exporter import ExportOptions
from deepctx.profiles.fold import SHOW_ALL, VIEWS_DEFAULT
from deepctx.profiles.pprof import Pprof
from deepctx.profiles.tree import from_doc


def test_hatchet_reads_the_literal_export(torch_doc: dict[str, Any]) -> None:
    ht = pytest.importorskip("hatchet")
    # the tree as recorded, node for node
    gf = ht.GraphFrame.from_literal(json.loads(HatchetLiteral().export(torch_doc, ExportOptions(fold=SHOW_ALL))))
    df = gf.dataframe
    assert len(df) == recorded.node_count(torch_doc)
    assert "calls" in gf.exc_metrics and "calls (inc)" in gf.inc_metrics
    for m, total in recorded.totals(torch_doc).items():
        assert df[m].sum() == total and df[f"{m} (inc)"].max() == total
    _, k = recorded.elementwise(torch_doc)
    kernel = df[df["name"] == k["name"]]
    assert list(kernel["calls"]) == [1000] and list(kernel["api_time_ns"]) == [k["metrics"]["api_time_ns"]]
    kinds = {n.frame["type"] for n in gf.graph.traverse()}
    assert kinds == {"root"} | {n["kind"] for _, n in recorded.nodes(torch_doc)}
    assert kinds == {"root", "thread", "python", "native", "api", "kernel", "memcpy", "sync"}


def hta_trace(tmp_path: Path, text: str) -> Any:
    hta = pytest.importorskip("hta.trace_analysis")
    d = tmp_path / "trace"
    d.mkdir()
    (d / "rank0.trace.json").write_text(text)
    return hta.TraceAnalysis(trace_dir=str(d))


def test_hta_reads_the_aggregated_chrome_export(tmp_path: Path, gpu_doc: dict[str, Any]) -> None:
    analysis = hta_trace(tmp_path, ChromeTrace().export(gpu_doc, ExportOptions()))
    df = analysis.t.get_trace(0)
    sym = analysis.t.symbol_table.sym_table
    cats = df["cat"].map(lambda i: sym[i])
    kernels = df[cats == "kernel"]
    assert [sym[i] for i in kernels["name"]] == ["vectorized_elementwise_kernel"]
    # 1000 launches x 2 us of device time; HTA trims float-timed slices by up to 1 us so they never overlap.
    assert 1999 <= list(kernels["dur"])[0] <= 2000 and len(kernels) == 1
    launches = df[(cats == "cuda_runtime") & (df["index_correlation"] > 0)]
    assert len(launches) == 3  # launch, copy, sync: each linked to its GPU slice by correlation
    breakdown, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
    assert set(breakdown["kernel_type"]) >= {"COMPUTATION"}


def test_hta_reads_a_recorded_trace(tmp_path: Path, gpu_doc: dict[str, Any]) -> None:
    doc = dict(gpu_doc, trace=trace_events())
    analysis = hta_trace(tmp_path, ChromeTrace().export(doc, ExportOptions()))
    stats = analysis.get_cuda_kernel_launch_stats(visualize=False)[0]
    assert sorted(stats["correlation"]) == [100, 101, 102, 103, 104, 200]  # five kernels and the copy
    kernels = stats[stats["correlation"] < 200]
    assert sorted(kernels["gpu_duration"]) == [2, 3, 4, 5, 6]
    assert list(kernels["launch_delay"]) == [13] * 5  # kernel start - launch end: 20 us - 7 us


def test_hta_kernel_breakdown_matches_a_recorded_resnet50_step(tmp_path: Path) -> None:
    """A ResNet-50 training step captured on the H200 with --trace (tests/gpu/test_device_activity.py):
    HTA's kernel time of today's export of it equals deepctx's within 1%."""
    pytest.importorskip("hta.trace_analysis")
    doc = json.loads(lzma.decompress((Path(__file__).parents[1] / "fixtures" / "profiles" / "h200_resnet50_trace.json.xz").read_bytes()))
    kernels = [ev for ev in doc["trace"] if ev["kind"] == "kernel"]
    assert len(kernels) == 2157 and len({ev["name"] for ev in kernels}) == 72  # what the capture holds
    ours, hta_ns = trace_kernel_ns(doc), hta_kernel_ns(doc, tmp_path / "trace")
    assert ours == tree_kernel_ns(doc) == 49_994_465
    assert abs(hta_ns - ours) <= 0.01 * ours, (hta_ns, ours)


def go_pprof() -> list[str]:
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed (apt-get install golang-go: it ships `go tool pprof`)")
    return [go, "tool", "pprof"]


def pprof_top(tmp_path: Path, doc: dict[str, Any], index: str) -> list[tuple[int, str]]:
    path = tmp_path / "p.pb.gz"
    path.write_bytes(Pprof().export(doc, ExportOptions()))
    env = dict(os.environ, HOME=str(tmp_path), GOCACHE=str(tmp_path / "gocache"), GOFLAGS="", GOPROXY="off")
    r = subprocess.run([*go_pprof(), "-top", "-nodecount=12", f"-sample_index={index}", "-symbolize=none", str(path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = []
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\d+)\s+[\d.]+%\s+[\d.]+%\s+\d+\s+[\d.]+%\s+(.+)$", line)
        if m:
            rows.append((int(m.group(1)), m.group(2)))
    return rows


def test_pprof_top_matches_the_flat_view(tmp_path: Path, torch_doc: dict[str, Any]) -> None:
    top = pprof_top(tmp_path, torch_doc, "calls")
    ours = [(r.self["calls"], r.frame.name) for r in sorted_rows(flat(from_doc(torch_doc, VIEWS_DEFAULT)), "calls") if r.self["calls"]]
    assert top[:6] == ours[:6]
    _, k = recorded.elementwise(torch_doc)
    assert top[0] == (1000, k["name"])


def test_pprof_top_of_cpu_samples_matches(tmp_path: Path, jax_doc: dict[str, Any]) -> None:
    top = pprof_top(tmp_path, jax_doc, "cpu_samples")
    ours = [(r.self["cpu_samples"], r.frame.name) for r in sorted_rows(flat(from_doc(jax_doc, VIEWS_DEFAULT)), "cpu_samples")]
    # Same values in the same order (ties may be ordered by other names); pprof shortens C++ signatures, so
    # names are compared where they are plain.
    assert [v for v, _ in top] == [v for v, _ in ours[: len(top)]]
    mine = dict((name, v) for v, name in ours)
    plain = [(v, name) for v, name in top if name in mine]
    assert len(plain) >= len(top) // 2
    assert all(mine[name] == v for v, name in plain)
    by_function: dict = {}
    for _, n in recorded.nodes(jax_doc):
        if n["kind"] != "thread":
            by_function[recorded.function(n)] = by_function.get(recorded.function(n), 0) + n["metrics"]["cpu_samples"]
    (first, most), (_, second) = sorted(by_function.items(), key=lambda kv: -kv[1])[:2]
    assert most > second and top[0] == (most, first[1])  # the function with the most self samples, counted here


def test_pprof_profile_is_gzipped(torch_doc: dict[str, Any]) -> None:
    assert gzip.decompress(Pprof().export(torch_doc, ExportOptions()))[:1] == b"\n"  # field 1, sample_type
