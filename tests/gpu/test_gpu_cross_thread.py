"""Cross-thread context on a GPU: PyTorch's backward kernels, launched by the autograd engine's device
threads, are charged to the Python line that called backward()."""

from __future__ import annotations

import sys
from pathlib import Path

from harness import StdinTarget, line_of, profile_phase
from profile_paths import walk

TARGETS = Path(__file__).resolve().parent / "targets"


def test_mlp_launches_sit_under_python_lines(daemon) -> None:
    from test_gpu_api import save_artifact

    t = StdinTarget([sys.executable, str(TARGETS / "torch_mlp.py")])
    try:
        doc = profile_phase(daemon, t)
    finally:
        t.stop()
    save_artifact("profile_torch_mlp.json.gz", doc)
    launches = [(anc, n) for anc, n in walk(doc) if n["kind"] == "kernel"]
    total = sum(n["metrics"]["calls"] for _, n in launches)
    with_line = sum(n["metrics"]["calls"] for anc, n in launches if any(a["kind"] == "python" for a in anc))
    print(f"launches: {total}, under a Python line: {with_line} ({100 * with_line / total:.2f}%)")
    assert total > 0 and with_line >= 0.99 * total
    backward = line_of(TARGETS / "torch_mlp.py", "LINE_BACKWARD")
    handed = [(anc, n) for anc, n in launches if any(a["kind"] == "op" and a["name"] == "[autograd backward]" for a in anc)]
    assert handed, "no launch charged through the autograd hand-off"
    for anc, _ in handed:
        op = next(i for i, a in enumerate(anc) if a["kind"] == "op")
        assert any(a["kind"] == "python" and a["line"] == backward for a in anc[:op]), [a["name"] for a in anc]
        assert anc[op + 1]["kind"] == "thread" and anc[op + 1]["tid"] != t.pid
    assert doc["stats"]["gpu_calls_handed_off"] > 0


def test_jax_launches_sit_under_the_calling_line(daemon) -> None:
    from test_gpu_api import save_artifact

    t = StdinTarget([sys.executable, str(TARGETS / "jax_jit.py")])
    try:
        doc = profile_phase(daemon, t)
    finally:
        t.stop()
    save_artifact("profile_jax_handoff.json.gz", doc)
    line = line_of(TARGETS / "jax_jit.py", "LINE_JAX")
    launches = [(anc, n) for anc, n in walk(doc) if n["kind"] == "kernel"]
    total = sum(n["metrics"]["calls"] for _, n in launches)
    under = sum(n["metrics"]["calls"] for anc, n in launches
                if any(a["kind"] == "python" and a["line"] == line for a in anc))
    print(f"JAX launches: {total}, under the line that calls the jitted function: {under}")
    assert not [w for w in doc["warnings"] if "hand-off point" in w], doc["warnings"]
    assert under == total
