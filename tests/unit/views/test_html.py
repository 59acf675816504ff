"""The HTML report without a browser: one self-contained file, the embedded data, sources and licences."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import recorded
from profile_paths import pc_sampled_with_source
from synth import trace_events

from deepctx.cli.formats.html import HTML_DIR, HtmlReport


def payload(html: str) -> dict:
    m = re.search(r'<script id="deepctx-data" type="application/json">(.*?)</script>', html, re.S)
    assert m
    return json.loads(m.group(1))


def test_the_page_is_self_contained(torch_doc) -> None:
    html = HtmlReport().render(torch_doc)
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:|//)', html)  # nothing to fetch
    assert "default-src 'none'" in html  # and the page may not fetch anything
    assert html.count("<script") == 3 and html.count("</script>") == 3  # data, vendored d3 + flame graph, app


def test_payload_holds_the_tree_in_preorder(torch_doc) -> None:
    _, kernel = recorded.elementwise(torch_doc)
    data = payload(HtmlReport().render(torch_doc))
    nodes = data["nodes"]
    assert len(nodes["parent"]) == recorded.node_count(torch_doc) and nodes["parent"][0] == -1
    assert all(p < i for i, p in enumerate(nodes["parent"]) if i)
    names = data["strings"]
    ks = [i for i, s in enumerate(nodes["name"]) if names[s] == kernel["name"]]
    assert len(ks) == 1
    k = ks[0]
    assert data["values"]["calls"][k] == 1000 and data["kinds"][nodes["kind"][k]] == "kernel"
    assert all(sum(data["values"][m]) == v for m, v in recorded.totals(torch_doc).items())
    assert sum(data["values"]["calls"]) == 1201 and data["defaultMetric"] == "cpu_samples"


def test_python_sources_are_embedded_when_readable(gpu_doc, source_file) -> None:
    # the profiled process was this test's user's (root's CLI reads sources as the process's owner)
    data = payload(HtmlReport().render(gpu_doc, owner_uid=os.geteuid()))
    assert data["sources"] == {str(source_file): source_file.read_text()}
    assert payload(HtmlReport(embed_sources=False).render(gpu_doc))["sources"] == {}
    source_file.unlink()
    assert payload(HtmlReport().render(gpu_doc, owner_uid=os.geteuid()))["sources"] == {}


def test_findings_and_trace_are_carried(gpu_doc) -> None:
    finding = {"rule": "launch-bound", "title": "t", "location": {"file": "f.py", "line": 3, "function": "g"},
               "evidence": {"launches": 1000}, "suggestion": "s", "estimated_speedup": 1.5, "confidence": 0.8}
    data = payload(HtmlReport().render(dict(gpu_doc, findings=[finding], trace=trace_events())))
    assert data["findings"] == [finding] and len(data["trace"]) == 12


def test_script_text_cannot_end_the_script_element(gpu_doc) -> None:
    doc = dict(gpu_doc, command="</script><script>alert(1)</script>")
    html = HtmlReport().render(doc)
    assert "</script><script>alert(1)" not in html
    assert payload(html)["title"] == doc["command"]


def test_vendored_files_are_small_and_licensed() -> None:
    vendor = HTML_DIR / "vendor"
    total = sum(p.stat().st_size for p in vendor.iterdir() if p.name.endswith(".js.xz"))
    assert 0 < total < 200_000
    assert "Apache License" in (vendor / "LICENSE.d3-flame-graph.txt").read_text()
    assert "ISC" in (vendor / "LICENSE.d3.txt").read_text() and "d3-selection" in (vendor / "LICENSE.d3.txt").read_text()


def test_diff_report_carries_both_sides(torch_doc, triton_doc) -> None:
    data = payload(HtmlReport().render_diff(torch_doc, triton_doc))
    assert data["mode"] == "diff"
    assert sum(data["base"]["calls"]) == recorded.metric_total(torch_doc, "calls") == 1201
    assert sum(data["values"]["calls"]) == recorded.metric_total(triton_doc, "calls") == 104  # 100 adds, 4 others
    statuses = {k["name"]: k["status"] for k in data["changes"]["kernels"]}
    _, kernel = recorded.elementwise(torch_doc)
    assert statuses[kernel["name"]] == "vanished" and statuses["deepctx_add_kernel"] == "appeared"


def test_template_has_every_marker() -> None:
    t = (HTML_DIR / "report.html").read_text()
    for marker in ("@TITLE@", "/*@CSS@*/", "@DATA@", "/*@VENDOR@*/", "/*@APP@*/"):
        assert t.count(marker) == 1
    assert Path(HTML_DIR / "app.js").stat().st_size < 100_000


def test_a_profile_with_gpu_time_opens_on_gpu_time(gpu_doc, torch_doc) -> None:
    """As `deepctx profile` does: GPU time where the profile has any (#34.9), CPU samples otherwise."""
    assert payload(HtmlReport().render(gpu_doc))["defaultMetric"] == "gpu_time_ns"
    assert payload(HtmlReport().render(torch_doc))["defaultMetric"] == "cpu_samples"  # no device times in it


def test_a_pc_sampled_kernels_cuda_source_is_embedded(tmp_path: Path) -> None:
    """The source pane shows the CUDA file a PC-sampled kernel's lines name (gpu_line nodes), like a Python
    file: the constructed profile's lines, pointed at a copy of the fixture's source."""
    doc, cu = pc_sampled_with_source(tmp_path)
    data = payload(HtmlReport().render(doc, owner_uid=os.geteuid()))
    assert data["sources"] == {str(cu): cu.read_text()}
    assert "gpu_line" in data["kinds"] and "gpu_instruction" in data["kinds"]
