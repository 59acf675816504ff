"""The CPU sampler's walks and the GPU probes' walks keep apart on a CPU (probes/walk_slots.bpf.h): a sample's
timer interrupt that comes while a uprobe_multi program walks the same thread's stack (the kernel does not keep
the two from nesting) once wrote its frames into the launch's half-built stack. At 9,999 samples a second, about
20 of 240,000 launches sat under paths whose Python frames appeared twice (or the native frames were lost), in
each of two runs; CI had met it once in 8,000 at the default rate. Every launch is under its own path now."""

from __future__ import annotations

import sys
from pathlib import Path

from harness import StdinTarget, cuda_runtime, line_of, profile_phase
from profile_paths import walk

TARGET = Path(__file__).resolve().parents[1] / "targets" / "gpu" / "same_frames.py"
N = 60_000  # per loop of the target: four loops, 240,000 launches in about a second


def test_samples_at_the_top_rate_leave_every_launchs_path_whole(daemon) -> None:
    t = StdinTarget([sys.executable, str(TARGET), cuda_runtime(), str(N)])
    try:
        doc = profile_phase(daemon, t, "--mode", "exact", "--rate", "9999")
    finally:
        t.stop()

    def at(*markers: str) -> tuple[int, ...]:
        return tuple(line_of(TARGET, m) for m in markers)

    python: dict[tuple[int, ...], int] = {}
    native: dict[tuple[int, ...], set[tuple[str, ...]]] = {}
    for anc, n in walk(doc):
        if n["kind"] == "api" and n["name"] == "cudaLaunchKernel":
            lines = tuple(a["line"] for a in anc if a["kind"] == "python" and a["file"] == str(TARGET))
            calls = n["metrics"]["calls"] + sum(d["metrics"]["calls"] for _, d in walk({"root": n}))
            python[lines] = python.get(lines, 0) + calls
            below = anc[next(i for i, a in enumerate(anc) if a["kind"] == "python" and a["line"] == lines[-1]) + 1:]
            native.setdefault(lines, set()).add(tuple(a["name"] for a in below if a["kind"] == "native"))
    assert python == {at("LINE_MAIN", "LINE_CALLS", "LINE_FIRST", "LINE_INNER"): N,
                      at("LINE_MAIN", "LINE_CALLS", "LINE_SECOND", "LINE_INNER"): N,
                      at("LINE_MAIN", "LINE_CALLS", "LINE_THIRD", "LINE_OTHER"): N,
                      at("LINE_MAIN", "LINE_CALLS", "LINE_RUN", "LINE_INNER"): N}, python
    # the samples were many (the test means nothing without them) and each line's launches one native path
    assert doc["stats"]["cpu_samples"] > 3000, doc["stats"]["cpu_samples"]
    assert all(len(paths) == 1 for paths in native.values()), native
