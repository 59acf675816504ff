"""torch.compile on the GPU (issue #33.2): under `deepctx run`, each Triton kernel Inductor generated and each
GEMM its code calls carry the model lines they came from; a recompile shows its cause and a graph break its
line and reason. Sampled mode profiles compiled code too (its captures once died on a code object's line
table)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from harness import DEEPCTX, line_of
from profile_paths import walk

REPO = Path(__file__).resolve().parents[2]
TARGET = Path(__file__).resolve().parent / "targets" / "torch_compiled.py"
AGENT = REPO / "native" / "build" / "libdeepctx_cupti.so"


def run(daemon, tmp_path: Path, mode: str, *args: str) -> dict:
    out = tmp_path / f"{mode}.json"
    r = subprocess.run([*DEEPCTX, "run", "--quiet", *args, "--format", "json", "-o", str(out), "--", sys.executable,
                        str(TARGET), mode], env=daemon.env() | {"DEEPCTX_AGENT": str(AGENT)},
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def compiled_kernels(doc: dict) -> list[dict]:
    return [n for _, n in walk(doc) if n["kind"] == "kernel" and n.get("compiled_from")]


def lines(node: dict) -> list[int]:
    return [s["line"] for s in node["compiled_from"]["lines"] if s["file"] == str(TARGET)]


@pytest.mark.parametrize("mode", ["exact", "sampled"])
def test_each_compiled_kernel_carries_its_model_lines(daemon, tmp_path: Path, mode: str) -> None:
    doc = run(daemon, tmp_path, "default", "--mode", mode)
    fc1, relu, add, fc2, loss = (line_of(TARGET, m) for m in ("LINE_FC1", "LINE_RELU", "LINE_ADD", "LINE_FC2", "LINE_LOSS"))
    kernels = compiled_kernels(doc)
    assert kernels, "no kernel carries compiled_from"
    by_name: dict[str, set[tuple[int, ...]]] = {}
    for n in kernels:
        by_name.setdefault(n["name"], set()).add(tuple(lines(n)))
    fused = [name for name in by_name if name.startswith("triton_poi_fused") and "relu" in name]
    assert fused, sorted(by_name)
    # the forward's fused bias + relu + scale + shift: lines FC1, RELU and ADD (its backward twin differs by name)
    assert any((fc1, relu, add) in by_name[name] for name in fused), {n: by_name[n] for n in fused}
    # the loss's reduction kernels come from LINE_LOSS alone; every compiled kernel has model lines
    assert all(lines(n) for n in kernels), [(n["name"], n["compiled_from"]) for n in kernels if not lines(n)]
    assert any(set(ls) == {loss} for ls in by_name.get(next((k for k in by_name if "mean" in k), ""), set()))
    # cuBLAS's GEMMs, launched from the wrapper's extern_kernels lines: fc2's forward GEMM has LINE_FC2 alone
    gemm_lines = {ls for name, s in by_name.items() if not name.startswith("triton_") for ls in s}
    assert (fc2,) in gemm_lines, gemm_lines
    assert doc["stats"]["compiled_kernel_paths_without_lines"] == 0, doc["stats"]
    assert [c["id"] for c in doc["compiles"]] == ["0/0"]


def test_recompile_and_graph_break_show_their_causes(daemon, tmp_path: Path) -> None:
    rec = run(daemon, tmp_path, "recompile", "--mode", "exact")
    reasons = [c["recompile_reason"] for c in rec["compiles"] if c["recompile_reason"]]
    assert reasons and "size mismatch at index 0" in reasons[0], rec["compiles"]
    brk = run(daemon, tmp_path, "break", "--mode", "exact")
    breaks = [b for c in brk["compiles"] for b in c["graph_breaks"]]
    assert [(b["file"], b["line"]) for b in breaks] == [(str(TARGET), line_of(TARGET, "LINE_BREAK"))], breaks
    assert "print" in breaks[0]["reason"]
    called = brk["compiles"][0]["called_from"]
    assert (called["file"], called["line"]) == (str(TARGET), line_of(TARGET, "LINE_CALL"))


def test_kernels_replayed_from_cuda_graphs_keep_their_model_lines(daemon, tmp_path: Path) -> None:
    """mode="reduce-overhead": the kernels run as CUDA graph replays, each under the path that captured its node
    (docs/device-activity.md), where the wrapper's launch line still stands: compiled_from holds there too."""
    doc = run(daemon, tmp_path, "graphs", "--mode", "exact")
    fc1, relu, add = (line_of(TARGET, m) for m in ("LINE_FC1", "LINE_RELU", "LINE_ADD"))
    replayed = [n for anc, n in walk(doc) if n["kind"] == "kernel" and n.get("compiled_from")
                and any(a["kind"] == "op" and a["name"] == "[graph node made at]" for a in anc)]
    assert replayed, "no compiled kernel under a graph replay"
    assert any(lines(n) == [fc1, relu, add] for n in replayed), [(n["name"], lines(n)) for n in replayed]
    assert sum(n["metrics"]["gpu_time_ns"] for n in replayed) > 0


JAX_TARGET = Path(__file__).resolve().parent / "targets" / "jax_compiled.py"


def test_jax_fusions_carry_their_lines_from_xlas_dump(daemon, tmp_path: Path) -> None:
    """`deepctx run` has XLA dump its optimized modules: each fusion kernel of the jitted step carries the lines of
    the operations fused into it (framework xla)."""
    out = tmp_path / "jax.json"
    r = subprocess.run([*DEEPCTX, "run", "--quiet", "--mode", "exact", "--format", "json", "-o", str(out), "--",
                        sys.executable, str(JAX_TARGET)], env=daemon.env() | {"DEEPCTX_AGENT": str(AGENT)},
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    marks = {m: line_of(JAX_TARGET, m) for m in ("LINE_DOT", "LINE_TANH", "LINE_ADD")}
    xla = [n for _, n in walk(doc) if n["kind"] == "kernel" and (n.get("compiled_from") or {}).get("framework") == "xla"]
    assert xla, sorted({n["name"] for _, n in walk(doc) if n["kind"] == "kernel"})
    mine = [n for n in xla if n["compiled_from"]["compile_id"] == "jit_deepctx_step"]
    lines = {tuple(s["line"] for s in n["compiled_from"]["lines"] if s["file"] == str(JAX_TARGET)) for n in mine}
    # the tanh, scale and shift fuse into one kernel (with the GEMM's epilogue, or a loop fusion of their own)
    assert any({marks["LINE_TANH"], marks["LINE_ADD"]} <= set(ls) for ls in lines), lines
    assert all(set(ls) <= set(marks.values()) for ls in lines), lines
