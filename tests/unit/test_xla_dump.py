"""XLA's optimized HLO modules parsed as text (host/xla_dump.py), on one JAX dumped on the development VM
(tests/fixtures/xla/: jx2.py, run from /tmp/jx2.py with XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text,
JAX 0.10.2, CPU backend: the module text is the same on a GPU, its fusions are others)."""

from __future__ import annotations

from pathlib import Path

from deepctx.host.compiled_sources import xla_dump_dir
from deepctx.host.xla_dump import kernel_name, parse_module

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "xla"
MODULE = FIX / "module_0004.jit_deepctx_step.cpu_after_optimizations.txt"
SRC = "/tmp/jx2.py"


def marked(marker: str) -> int:
    return next(i for i, line in enumerate((FIX / "jx2.py").read_text().splitlines(), 1) if line.endswith(f"# {marker}"))


def test_each_fusion_carries_its_operations_and_the_users_lines() -> None:
    m = parse_module(MODULE.read_text())
    assert m is not None and m.name == "jit_deepctx_step"
    assert sorted(m.fusions) == ["broadcast_add_fusion", "ynn_fusion"]
    dot, fused = m.fusions["ynn_fusion"], m.fusions["broadcast_add_fusion"]
    assert dot.ops == ("jit(deepctx_step)/dot_general",)
    assert [(s.file, s.line, s.function) for s in dot.lines] == [(SRC, marked("LINE_DOT"), "deepctx_step")]
    # tanh and mul come from helper()'s line (their innermost frame), the add from deepctx_step's own
    assert fused.ops == ("jit(deepctx_step)/add", "jit(deepctx_step)/tanh", "jit(deepctx_step)/mul")
    assert [(s.line, s.function) for s in fused.lines] == [(marked("LINE_HELPER"), "helper"),
                                                           (marked("LINE_ADD"), "deepctx_step")]
    # the traced stacks hold the lines that called the jitted function (outer's, the module's loop)
    assert {(SRC, marked("LINE_OUTER")), (SRC, 17)} <= m.locations


def test_names_and_flags() -> None:
    assert kernel_name("gemm_fusion_dot.1") == "gemm_fusion_dot_1" and kernel_name("loop_add_fusion") == "loop_add_fusion"
    assert kernel_name("input_reduce-fusion.2") == "input_reduce_fusion_2"
    assert parse_module("HloModule x\n") is not None and parse_module("not a module") is None
    assert xla_dump_dir("--xla_gpu_autotune_level=0 --xla_dump_to=/tmp/d --xla_dump_hlo_as_text") == "/tmp/d"
    assert xla_dump_dir("--xla_dump_to=sponge") is None and xla_dump_dir(None) is None
