"""Lane-varying and warp-uniform branches of real sm_90 SASS (host/sass_uniformity.py, host/sass_cfg.py), on the
NVRTC cubins of tests/fixtures/cubin (build_nvrtc.py: branches.cu, and planted_divergence.cu, the warp-divergence
pair of examples/inefficiencies/kernels/planted.cu)."""

from __future__ import annotations

import lzma
import os
import re
from pathlib import Path

import pytest

from deepctx.host import sass, sass_uniformity
from deepctx.host.sass_uniformity import Branch

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "cubin"
needs_nvdisasm = pytest.mark.skipif(sass.find_nvdisasm() is None,
                                    reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")


def branches(cubin: str, function: str, block_x: int | None = 256) -> dict[int, Branch]:
    d = sass.disassemble(lzma.decompress((FIXTURES / cubin).read_bytes()))
    return {b.offset: b for b in sass_uniformity.analyze(d.functions[function], d.labels[function], block_x)}


def facts(b: Branch) -> tuple:
    return b.kind, b.predicate, b.lanes, b.source, os.path.basename(b.file or ""), b.line


def side(offsets: tuple[int, ...]) -> tuple[int, int, int]:
    """(first, last, count): the side is every instruction from first to last."""
    assert list(offsets) == list(range(offsets[0], offsets[-1] + 16, 16))
    return offsets[0], offsets[-1], len(offsets)


@needs_nvdisasm
def test_odd_and_even_lanes_split_every_warp_in_the_planted_bad_kernel() -> None:
    b = branches("planted_divergence.sm_90.cubin.xz", "_Z13branchy_lanesPfi")
    assert sorted(b) == [0x70, 0xF0]
    assert facts(b[0x70]) == ("exit", "P0", "varying", "(c[0x0][RZ] * UR4 + SR_TID.X) >= UR4",
                              "planted_divergence.cu", 19)  # if (i >= n) return;
    assert b[0x70].region is None
    branch = b[0xF0]
    assert branch.text == "@P0 BRA `(.L_x_5)"
    assert facts(branch) == ("branch", "P0", "varying", "(SR_TID.X & 0x1) != 0x1", "planted_divergence.cu", 22)
    assert branch.region is not None
    # path_b (taken: even lanes) and path_a (fall-through), 256 unrolled FFMAs each, meet at the BSYNC
    assert side(branch.region.taken) == (0x1120, 0x2120, 257)
    assert side(branch.region.fallthrough) == (0x100, 0x1110, 258)
    assert branch.region.reconverge == 0x2130


@needs_nvdisasm
def test_the_planted_fixed_kernel_branches_on_warp_uniform_tid_x_bits() -> None:
    """(threadIdx.x / 32) & 1 compiles to tid.x & 0x20: one value per warp when blockDim.x is a multiple of 32."""
    aligned = branches("planted_divergence.sm_90.cubin.xz", "_Z13branchy_warpsPfi", 256)
    assert sorted(aligned) == [0x70, 0xE0]
    assert facts(aligned[0xE0]) == ("branch", "!P0", "uniform", "", "planted_divergence.cu", 30)
    assert aligned[0x70].lanes == "varying"  # the i >= n guard
    unknown = branches("planted_divergence.sm_90.cubin.xz", "_Z13branchy_warpsPfi", None)[0xE0]
    assert (unknown.lanes, unknown.source) == ("unknown", "(SR_TID.X & 0x20) != 0")
    assert branches("planted_divergence.sm_90.cubin.xz", "_Z13branchy_warpsPfi", 48)[0xE0].lanes == "varying"
    assert aligned[0xE0].region is not None and side(aligned[0xE0].region.taken) == (0x1110, 0x2110, 257)


@needs_nvdisasm
def test_uniform_conditions_from_parameters_and_block_indices() -> None:
    assert facts(branches("branches.sm_90.cubin.xz", "by_param")[0x30]) == (
        "exit", "!P0", "uniform", "", "branches.cu", 6)
    assert facts(branches("branches.sm_90.cubin.xz", "by_block")[0x40]) == (
        "exit", "P0", "uniform", "", "branches.cu", 12)


@needs_nvdisasm
def test_a_value_loaded_through_a_per_lane_address_varies() -> None:
    b = branches("branches.sm_90.cubin.xz", "by_value")
    assert facts(b[0xA0]) == ("exit", "!P0", "varying", "(the LDG.E at 0x0080 (a per-lane address)) > RZ",
                              "branches.cu", 18)
    sqrt = b[0xF0]  # sqrtf's slow path: a CALL on one side
    assert (sqrt.kind, sqrt.lanes, sqrt.region and sqrt.region.reconverge) == ("branch", "varying", 0x170)
    assert sqrt.region is not None and (sqrt.region.taken, sqrt.region.fallthrough) == (
        (0x130, 0x140, 0x150, 0x160), (0x100, 0x110, 0x120))
    # the slow path's own branches are reached by a CALL only: not analysed
    assert [(o, b[o].lanes, b[o].source) for o in (0x1D0, 0x200, 0x230)] == [
        (0x1D0, "unknown", "unreachable"), (0x200, "unknown", "unreachable"), (0x230, "unknown", "unreachable")]


@needs_nvdisasm
def test_a_loop_with_a_per_lane_trip_count() -> None:
    b = branches("branches.sm_90.cubin.xz", "by_lane_loop")
    assert sorted(b) == [0xB0, 0x150, 0x1F0]
    assert facts(b[0xB0])[:4] == ("branch", "!P0", "varying", "(SR_TID.X & 0x7) != 0")
    assert (b[0x1F0].kind, b[0x1F0].lanes, b[0x1F0].region) == ("loop", "varying", None)
    assert b[0x150].lanes == "varying"


def test_the_fixture_kernels_are_planted_cu_s() -> None:
    """planted_divergence.cu is planted.cu's warp-divergence kernels and helpers, verbatim."""
    planted = (REPO / "examples" / "inefficiencies" / "kernels" / "planted.cu").read_text()
    fixture = (FIXTURES / "planted_divergence.cu").read_text()
    code = fixture[fixture.index("__device__"):]
    assert code.strip() in planted
    assert re.findall(r"__global__ void (\w+)", code) == ["branchy_lanes", "branchy_warps"]


def test_labels_are_the_offsets_of_the_instructions_after_them() -> None:
    text = """//--------------------- .text.k        --------------------------
        /*0000*/                   ISETP.NE.AND P0, PT, R0, RZ, PT ;
        /*0010*/               @P0 BRA `(.L_x_1) ;
.L_x_0:
.L_x_2:
        /*0020*/                   EXIT ;
.L_x_1:
        /*0030*/                   EXIT ;
"""
    assert sass.parse_labels(text) == {"k": {".L_x_0": 0x20, ".L_x_2": 0x20, ".L_x_1": 0x30}}
    ins = sass.parse(text)["k"]
    (b,) = sass_uniformity.analyze(ins, sass.parse_labels(text)["k"], 256)
    assert (b.offset, b.lanes, b.source) == (0x10, "unknown", "R0 != RZ")  # R0 never written: unknown
    assert b.region is not None and (b.region.taken, b.region.fallthrough, b.region.reconverge) == (
        (0x30,), (0x20,), None)
