"""Cross-thread context on the real CUDA runtime, without a GPU: a C thread pool's workers launch after
a hand-off from Python, and the launches are charged to the Python line that handed the work off."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from harness import StdinTarget, line_of, profile_phase, start_daemon, stop_daemon
from profile_paths import walk

TARGET = Path(__file__).resolve().parents[1] / "targets" / "gpu" / "handoff_calls.py"
ROUNDS, PER_ROUND = 6, 5


@pytest.fixture(scope="module")
def handoff_daemon(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("handoff")
    cfg = tmp / "d.toml"
    cfg.write_text('[[handoff_points]]\nlibrary = "^libhandoff\\\\.so$"\nsymbol = "handoff_run"\nlabel = "[test pool]"\n')
    d = start_daemon(tmp, "--config", str(cfg))
    yield d
    assert stop_daemon(d) == 0


def test_worker_launches_under_the_handing_off_line(handoff_daemon, native_targets: Path) -> None:
    from test_gpu_api_cpu import cuda_runtime

    t = StdinTarget([sys.executable, str(TARGET), str(native_targets / "libhandoff.so"), cuda_runtime()])
    try:
        doc = profile_phase(handoff_daemon, t)
    finally:
        t.stop()
    line = line_of(TARGET, "LINE_HANDOFF")
    kernels = [(anc, n) for anc, n in walk(doc) if n["kind"] == "kernel" and n["name"] == "handoff_kernel_stub"]
    assert sum(n["metrics"]["calls"] for _, n in kernels) == ROUNDS * PER_ROUND
    for anc, _ in kernels:
        kinds = [(a["kind"], a["name"]) for a in anc]
        # origin thread (the Python main thread) -> ... -> the line -> handoff_run -> [test pool] -> worker
        assert anc[0]["kind"] == "thread" and anc[0]["tid"] == t.pid, kinds
        py = [i for i, a in enumerate(anc) if a["kind"] == "python" and a["line"] == line]
        op = [i for i, a in enumerate(anc) if a == {**a, "kind": "op", "name": "[test pool]"}]
        workers = [i for i, a in enumerate(anc) if a["kind"] == "thread" and a["name"] == "handoff-wk"]
        run = [i for i, a in enumerate(anc) if a["name"] == "handoff_run"]
        assert len(py) == 1 and len(op) == 1 and len(workers) == 1 and run, kinds
        assert py[0] < run[0] < op[0] < workers[0], kinds
        assert anc[workers[0]]["tid"] != t.pid
        assert anc[-1] == {**anc[-1], "kind": "api", "name": "cudaLaunchKernel"}
        assert "run_task" in [a["name"] for a in anc[workers[0]:]]
    assert doc["stats"]["gpu_handoffs"] == ROUNDS
    assert doc["stats"]["gpu_calls_handed_off"] == ROUNDS * PER_ROUND
    assert not [w for w in doc["warnings"] if "hand-off point" in w]
