"""A target that exits right after making new call paths: frames whose code objects the daemon could not read
before the exit are [unknown], and the profile says how many (stats and a warning that names the exit as the
cause), counted after every call path, the GPU calls' too, has been resolved."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness import DEEPCTX, StdinTarget, session_of, start_daemon, stop_daemon, wait_for
from profile_paths import walk
from targets.gpu.many_sites import source

SITES = 60


def test_unknown_python_frames_are_counted_after_every_path_and_warned(tmp_path: Path) -> None:
    from test_gpu_api_cpu import cuda_runtime

    script = tmp_path / "exits_at_once.py"
    script.write_text(source(cuda_runtime(), SITES, 5, 0))
    d = start_daemon(tmp_path)
    try:
        t = StdinTarget([sys.executable, str(script)])
        out = tmp_path / "p.json"
        attach = subprocess.Popen([*DEEPCTX, "attach", str(t.pid), "--mode", "exact", "--duration", "600",
                                   "--format", "json", "--quiet", "-o", str(out)], env=d.env())
        wait_for(lambda: (session_of(d, t.pid) or {}).get("state") == "capturing", timeout=120, what="the capture")
        t.go()
        assert t.proc.wait(timeout=60) == 0
        assert attach.wait(timeout=120) == 0
    finally:
        stop_daemon(d)
    doc = json.loads(out.read_text())
    launches = sum(n["metrics"]["calls"] for _, n in walk(doc) if n["kind"] == "kernel")
    assert launches == SITES * 5
    unknown_nodes = sum(1 for _, n in walk(doc) if n["kind"] == "python" and n["name"] == "[unknown]")
    counted = doc["stats"]["python_unknown_frames"]
    assert (counted > 0) == (unknown_nodes > 0), (counted, unknown_nodes)
    # the CPU samples and GPU calls under [unknown] frames, once per path; the warning names the exit, the one cause
    # left for them (a running process's unreadable code is [code object freed])
    def under(metric: str) -> int:
        return sum(n["metrics"][metric] for above, n in walk(doc)
                   if any(p["kind"] == "python" and p["name"] == "[unknown]" for p in [*above, n]))

    calls, samples = under("calls"), under("cpu_samples")
    assert (doc["stats"].get("gpu_calls_python_unknown", 0), doc["stats"].get("cpu_samples_python_unknown", 0)) == (
        calls, samples)
    assert (calls + samples > 0) == (unknown_nodes > 0)
    warned = [w for w in doc["warnings"] if "[unknown]" in w]
    assert len(warned) == (1 if calls + samples else 0)
    assert all(w.startswith("[unknown] Python frames on ") and w.endswith(
        ": the process had exited before deepctxd read their code objects (call paths first seen in its last moments)")
        for w in warned)
    assert not any("freed code" in w or "[code object freed]" in w for w in doc["warnings"])
