"""deepctx analyze on a file (text and JSON), and the findings in deepctx report (terminal and HTML)."""

from __future__ import annotations

import gzip
import json
import lzma
import re
from pathlib import Path

from deepctx.cli.main import main

FIXTURE = str(Path(__file__).resolve().parents[2] / "fixtures" / "profiles" / "h200_torch_ops.json.xz")


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_analyze_json_is_the_document_with_findings(capsys) -> None:
    rc, out, _ = run(capsys, "analyze", FIXTURE, "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["schema"] == "deepctx.profile/v1" and doc["pid"] == 604
    assert [(f["rule"], f["location"]["line"]) for f in doc["findings"]] == [("launch-bound-loop", 19), ("fp32-gemm", 26)]
    assert doc["analysis"]["rules"][0] == {
        "rule": "host-bound-step", "title": "GPU idle while the host is busy", "needs": "device",
        "status": "not_evaluated", "findings": 0,
        "reason": "the profile has no device activity (no gpu_time_ns, no trace), so the GPU's idle time is unknown; "
                  "capture with the CUPTI agent (deepctx run, or attach --gpu-activity)",
        "baseline": {"kind": "critical", "time_ns": 245_487_699,
                     "source": "main thread 604: CPU time outside GPU calls plus the time inside them"}}


def test_analyze_text(capsys) -> None:
    rc, out, _ = run(capsys, "analyze", FIXTURE)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "/opt/torch/.venv/bin/python3 /work/main/tests/gpu/targets/torch_ops.py  pid 604"
    flat = " ".join(out.split())
    assert "1. launch-bound-loop ~1.03x confidence 0.4 1000 kernel launches from one line" in flat
    assert "at torch_ops.py:19 in multiply" in flat
    assert "via <module> (torch_ops.py:53) -> main (torch_ops.py:44) -> multiply (torch_ops.py:19)" in flat
    assert "evidence: launches 1000; host_per_launch_ns 8.30 µs; host_time_ns 8.30 ms;" in flat
    assert "2. fp32-gemm not estimated confidence 0.4" in flat
    assert "not evaluated: host-bound-step: the profile has no device activity" in flat
    assert "below the threshold: sync-in-loop: 1 candidate(s) below the 1.02x threshold" in flat


def test_analyze_output_files_and_options(capsys, tmp_path: Path) -> None:
    gz = tmp_path / "analyzed.json.gz"
    assert run(capsys, "analyze", FIXTURE, "--format", "json", "-o", str(gz), "--rules", "fp32-gemm")[0] == 0
    doc = json.loads(gzip.decompress(gz.read_bytes()))
    assert [f["rule"] for f in doc["findings"]] == ["fp32-gemm"]
    assert [r["rule"] for r in doc["analysis"]["rules"]] == ["fp32-gemm"]
    txt = tmp_path / "findings.txt"
    rc, _, err = run(capsys, "analyze", FIXTURE, "-o", str(txt), "--min-speedup", "1.0")
    assert rc == 0 and f"findings written to {txt}" in " ".join(err.split())
    assert "sync-in-loop ~1x confidence 0.4" in " ".join(txt.read_text().split()) and "\x1b[" not in txt.read_text()


def test_analyze_errors(capsys, tmp_path: Path) -> None:
    rc, _, err = run(capsys, "analyze", FIXTURE, "--rules", "fp32-gemm,nope")
    assert rc == 2 and err.startswith("deepctx: --rules: no rule named nope (rules: host-bound-step,")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    rc, _, err = run(capsys, "analyze", str(bad))
    assert rc == 2 and "not a deepctx profile" in err
    rc, _, err = run(capsys, "--socket", str(tmp_path / "none.sock"), "analyze", "4242")  # a pid: needs the daemon
    assert rc == 3 and "deepctxd" in err


def test_report_ends_with_the_findings(capsys) -> None:
    rc, out, _ = run(capsys, "report", FIXTURE, "--color", "never", "--width", "200")
    assert rc == 0
    tail = out[out.index("\nfindings"):]
    assert " 1. launch-bound-loop  ~1.03x  confidence 0.4  1000 kernel launches from one line" in tail
    assert "    at torch_ops.py:19 in multiply  /work/main/tests/gpu/targets/torch_ops.py" in tail
    assert "not evaluated:" in tail and "evidence:" not in tail  # brief in the report
    rc, out, _ = run(capsys, "report", FIXTURE, "--color", "never", "--no-findings")
    assert "findings" not in out


def html_data(path: Path) -> dict:
    text = path.read_text()
    m = re.search(r'<script id="deepctx-data" type="application/json">(.*?)</script>', text, re.S)
    assert m
    return json.loads(m.group(1))


def test_report_html_analyzes_documents_without_findings(capsys, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert run(capsys, "report", FIXTURE, "--html", str(out), "--no-sources")[0] == 0
    data = html_data(out)
    assert [(f["rule"], f["location"]["line"]) for f in data["findings"]] == [("launch-bound-loop", 19), ("fp32-gemm", 26)]
    # a document that already carries findings keeps them (here: none)
    doc = json.loads(lzma.decompress(Path(FIXTURE).read_bytes()))
    doc["findings"] = []
    given = tmp_path / "given.json"
    given.write_text(json.dumps(doc))
    assert run(capsys, "report", str(given), "--html", str(out), "--no-sources")[0] == 0
    assert html_data(out)["findings"] == []
