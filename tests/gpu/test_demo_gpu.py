"""The README's demo on a real GPU (#34.1): with nvidia-smi working and PyTorch present, examples/demo.py
profiles examples/inefficiencies/launch_bound_loop.py on this machine's GPU (not the simulated one), prints its
kernels under the Python line that launched them with real device times and the launch-bound-loop finding,
writes the profile, a trace and the HTML report, and leaves nothing in the temporary folder."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from profile_paths import walk

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo.py"
WORKLOAD = REPO / "examples" / "inefficiencies" / "launch_bound_loop.py"
STEPS, WARMUP, REPEATS = 500, 3, 100  # the demo's --steps, _protocol.serve's warm-up, the loop's kernels a step


def marked_line(marker: str) -> int:
    found = [i for i, ln in enumerate(WORKLOAD.read_text().splitlines(), 1) if marker in ln]
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A TMPDIR of its own, short enough for the daemon's socket below it."""
    path = Path(tempfile.mkdtemp(prefix="dg-"))
    yield path
    shutil.rmtree(path)


def test_demo_on_the_real_gpu(tmp_path: Path, short_tmp: Path) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("the demo takes the real GPU only with PyTorch installed")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "DEEPCTX_SOCKET", "CUDA_INJECTION64_PATH")}
    env.update(DEEPCTX_DEMO_OUT=str(out), TMPDIR=str(short_tmp))
    r = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, env=env, timeout=540)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "SIMULATED GPU" not in r.stdout
    assert "profiled examples/inefficiencies/launch_bound_loop.py on this machine's GPU" in r.stdout
    assert sorted(p.name for p in short_tmp.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == ["profile.json", "report.html", "trace.json"]

    # every launch of the loop's line (exact mode, from the process's start): its kernels, timed by the GPU
    line = marked_line("LINE_LAUNCH_BOUND_LOOP")
    doc = json.loads((out / "profile.json").read_text())
    calls = gpu_ns = 0
    for anc, node in walk(doc):
        if node["kind"] == "kernel" and any(a["kind"] == "python" and (a["name"], a["line"]) == ("main.<locals>.step", line)
                                            for a in anc):
            calls += node["metrics"]["calls"]
            gpu_ns += node["metrics"].get("gpu_time_ns", 0)
    assert calls == REPEATS * (STEPS + WARMUP)
    assert gpu_ns > 0

    finding = re.search(r"^\s*\d+\. launch-bound-loop  ~(\d+(?:\.\d+)?)x", r.stdout, re.M)
    assert finding and float(finding.group(1)) > 1.0, r.stdout[-3000:]
    assert f"at launch_bound_loop.py:{line} in main.<locals>.step" in r.stdout
    trace = json.loads((out / "trace.json").read_text())
    assert any(e.get("cat") == "kernel" for e in trace["traceEvents"])
    assert "launch_bound_loop.py" in (out / "report.html").read_text()
