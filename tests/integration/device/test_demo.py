"""The README's demo without a GPU (#34.1): examples/demo.py, as `./install.sh demo` runs it, profiles
examples/simulated_train.py on the mock CUDA runtime and CUPTI, says the device is simulated, prints the
kernels under their Python lines with device times and the launch-bound-loop finding with its speedup,
writes the profile, a trace and the HTML report where it says, and leaves nothing in the temporary folder.
Its daemon loads every probe family the simulated GPU needs, so bcc's warnings about str names show here.

Another deepctxd that profiles every new process (--continuous) on the same machine attaches to the
workload first and raises the CUPTI agent's semaphore, which releases it before this run's daemon is
ready: it then exits before the attach ('exited while deepctx was attaching'). The suite's continuous
daemons therefore take only their own targets (continuous_match, tests/unit/test_xdist_groups.py)."""

from __future__ import annotations

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
from device_paths import REPO
from profile_paths import walk

DEMO = REPO / "examples" / "demo.py"
WORKLOAD = REPO / "examples" / "simulated_train.py"
TINY_NS, MATMUL_NS = 300, 5_000  # simulated_train.py's made-up kernel times
ADD_BIAS, MATMUL = "add_bias(float*, float const*, int)", "mock_matmul(float*, int)"


def line_with(text: str) -> int:
    """The one line of simulated_train.py that holds text."""
    found = [i for i, ln in enumerate(WORKLOAD.read_text().splitlines(), 1) if text in ln]
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A TMPDIR of its own, short: the daemon's sockets go in the demo's scratch folder below it, and a Unix
    socket's path holds 107 bytes (pytest's tmp_path is too deep)."""
    path = Path(tempfile.mkdtemp(prefix="dd-"))
    yield path
    shutil.rmtree(path)


def test_demo_on_a_simulated_gpu(built: tuple[Path, Path], tmp_path: Path, short_tmp: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "DEEPCTX_SOCKET")}
    env.update(DEEPCTX_DEMO_OUT=str(out), TMPDIR=str(short_tmp))  # its scratch folder goes there
    # every DeprecationWarning printed, the daemon's included: bcc's about str names is one (#34.4)
    env["PYTHONWARNINGS"] = "always::DeprecationWarning"
    r = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "SIMULATED GPU: no GPU here (nvidia-smi fails)" in r.stdout
    assert "not a bytes object" not in r.stderr  # the probes hand bcc bytes for every name
    assert sorted(p.name for p in short_tmp.iterdir()) == []  # no deepctx-demo-* folder, nothing else either
    assert sorted(p.name for p in out.iterdir()) == ["profile.json", "report.html", "trace.json"]

    # device times, exact on the simulated device, under the lines that launched the kernels
    bias_line, matmul_line = line_with("cu.cuLaunchKernel("), line_with("launch(rt, stub, 1024)")
    doc = json.loads((out / "profile.json").read_text())
    kernels = {ADD_BIAS: 0, MATMUL: 0}
    for anc, node in walk(doc):
        if node["kind"] == "kernel":
            python = {(a["name"], a["line"]) for a in anc if a["kind"] == "python"}
            kernels[node["name"]] += node["metrics"]["calls"]
            ns = TINY_NS if node["name"] == ADD_BIAS else MATMUL_NS
            assert node["metrics"]["gpu_time_ns"] == ns * node["metrics"]["calls"]
            assert (("add_bias", bias_line) if node["name"] == ADD_BIAS else ("matmul", matmul_line)) in python
    assert kernels[ADD_BIAS] > 1000 and kernels[MATMUL] > 10

    # the terminal tree (a pipe: rows whole): the kernel below its Python line
    rows = r.stdout.splitlines()
    at = next(i for i, ln in enumerate(rows) if re.search(rf"─add_bias  \S*simulated_train\.py:{bias_line}\b", ln))
    assert any(f"─{ADD_BIAS}  [kernel]" in ln for ln in rows[at + 1:at + 6])
    finding = re.search(r"^ 1\. launch-bound-loop  ~(\d+(?:\.\d+)?)x  confidence", r.stdout, re.M)  # ~3x, ~2.7x
    assert finding and float(finding.group(1)) > 1.0, r.stdout[r.stdout.find("findings"):][:3000]
    assert f"at simulated_train.py:{bias_line} in add_bias" in r.stdout

    trace = json.loads((out / "trace.json").read_text())
    assert trace["deepctx"]["synthetic"] is False
    assert {e["name"] for e in trace["traceEvents"] if e.get("cat") == "kernel"} == {ADD_BIAS, MATMUL}
    assert ADD_BIAS in (out / "report.html").read_text()
    assert f"\nprofiled examples/simulated_train.py on a simulated GPU\nwritten: the profile {out}" in r.stdout
    for what, name in (("the profile", "profile.json"), ("the timeline", "trace.json"),
                       ("the HTML report", "report.html")):
        assert f"{what} {out / name}" in r.stdout
