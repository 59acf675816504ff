"""Continuous mode: deepctxd finds a GPU process by itself, profiles it in windows, and the window store
answers `deepctx profile` and `deepctx top` with exact counts (the real CUDA runtime, no GPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness import StdinTarget, line_of, session_of, wait_for

TARGET = Path(__file__).resolve().parents[2] / "targets" / "gpu" / "runtime_calls.py"
N_LAUNCH, N_HANDLE, N_MALLOC = 200, 4, 7


def launches_in_store(daemon, pid: int) -> int:
    r = daemon.cli("profile", "--pid", str(pid), "--since", "1h", "--format", "json")
    if r.returncode != 0:
        return -1
    doc = json.loads(r.stdout)
    total = 0
    stack = [doc["root"]]
    while stack:
        n = stack.pop()
        if n["kind"] == "kernel":
            total += n["metrics"]["calls"]
        stack.extend(n["children"])
    return total


def test_gpu_process_is_found_and_profiled_in_windows(service_dir, stopped) -> None:
    from test_gpu_api_cpu import cuda_runtime

    d = service_dir.start("--continuous", continuous_window_s=1.0, continuous_scan_s=0.2)
    stopped.append(d)
    t = StdinTarget([sys.executable, str(TARGET), "cuda", cuda_runtime(), "--launches", str(N_LAUNCH)])
    try:
        # found by the scan (it maps libcudart), no attach asked for
        wait_for(lambda: (session_of(d, t.pid) or {}).get("state") == "capturing", timeout=120,
                 what="the continuous capture of the GPU process")
        st = session_of(d, t.pid)
        assert st is not None and "gpu" in st["probes"]
        t.go()
        t.expect("done")
        # every launch lands in some window; windows are cut every second
        wait_for(lambda: launches_in_store(d, t.pid) == N_LAUNCH + 2 * N_HANDLE, timeout=60,
                 what="all launches in the stored windows")
    finally:
        t.stop()
    r = d.cli("profile", "--pid", str(t.pid), "--since", "1h", "--format", "json")
    doc = json.loads(r.stdout)
    line = line_of(TARGET, "LINE_MALLOC")
    mallocs = 0
    stack: list[tuple[list[dict], dict]] = [([], doc["root"])]
    while stack:
        anc, n = stack.pop()
        if n["kind"] == "api" and n["name"] == "cudaMalloc" and any(a["line"] == line for a in anc):
            mallocs += n["metrics"]["calls"]
        stack.extend((anc + [n], c) for c in n["children"])
    assert mallocs == N_MALLOC  # counts stay exact in sampled mode, paths from the Python walker
    top = json.loads(d.cli("top", "--once", "--since", "1h", "--format", "json").stdout)
    assert t.pid in [p["pid"] for p in top["processes"]]
