"""Cross-thread context on a GPU: PyTorch's backward kernels, launched by the autograd engine's device
threads, are charged to the forward line that created their autograd node (or, for nodes whose creation
was not seen, to the line that called backward()); a jitted JAX function's kernels to the calling line."""

from __future__ import annotations

import sys
from pathlib import Path

from harness import StdinTarget, line_of, profile_phase
from profile_paths import walk

TARGETS = Path(__file__).resolve().parent / "targets"
STEPS = 20  # torch_mlp.py's timed steps


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
    src = TARGETS / "torch_mlp.py"
    backward, fc1 = line_of(src, "LINE_BACKWARD"), line_of(src, "LINE_FC1")
    by_op: dict[str, int] = {}
    for anc, n in launches:
        ops = [a["name"] for a in anc if is_label(a)]
        how = ops[0] if ops else "(launched by its own thread)"
        by_op[how] = by_op.get(how, 0) + n["metrics"]["calls"]
    print("launches by how they got their Python line:", by_op)
    print("threads:", sorted({a["name"] for anc, _ in launches for a in anc if a["kind"] == "thread"}))
    for anc, _ in launches:
        ops = [i for i, a in enumerate(anc) if is_label(a)]
        if not ops:
            continue
        op = ops[0]
        assert anc[op + 1]["kind"] == "thread" and anc[op + 1]["tid"] != t.pid, [a["name"] for a in anc]
        if anc[op]["name"] == "[autograd backward]":  # nodes whose creation was not seen (AccumulateGrad)
            assert any(a["kind"] == "python" and a["line"] == backward for a in anc[:op]), [a["name"] for a in anc]
        else:  # a backward node's kernels under the forward line that created the node
            assert anc[op]["name"].startswith("[backward of ") and anc[op - 1]["kind"] == "python"
    # nn.Linear at LINE_FC1: its backward (weight and bias gradients) under that line, on the autograd thread
    fc1_bwd = [(anc, n) for anc, n in launches
               if any(a["kind"] == "op" and a["name"] == "[backward of AddmmBackward0]" for a in anc)
               and any(a["kind"] == "python" and a["line"] == fc1 for a in anc)]
    print("AddmmBackward0 kernels under LINE_FC1:", sorted({n["name"][:60] for _, n in fc1_bwd}))
    assert sum(n["metrics"]["calls"] for _, n in fc1_bwd) >= 2 * STEPS  # weight grad GEMM + bias grad, per step
    for anc, _ in fc1_bwd:
        op = next(i for i, a in enumerate(anc) if is_label(a))
        assert "autograd device" in anc[op + 1]["name"], anc[op + 1]
    assert not [w for w in doc["warnings"] if "hand-off point" in w], doc["warnings"]
    assert doc["stats"]["gpu_calls_charged_to_node_creator"] > 0
    assert doc["stats"]["autograd_nodes_run_with_creator"] > 0


def is_label(node: dict) -> bool:
    """An op node that tells how a launch got its Python line ([backward of X], [autograd backward]), not a
    PyTorch operator (aten::mm)."""
    return node["kind"] == "op" and node["name"].startswith("[")


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
    print("JAX threads:", sorted({a["name"] for anc, _ in launches for a in anc if a["kind"] == "thread"}))
    assert not [w for w in doc["warnings"] if "hand-off point" in w], doc["warnings"]
    assert under == total
