"""Warp divergence from the daemon to the finding: constructed PC samples on the planted pair's NVRTC cubin
(tests/fixtures/cubin/planted_divergence.cu) go through daemon/pc_tree.py, whose SASS data flow lists the
lane-varying branches on the gpu_function node (`branches`), through the Profile message, the store's wire and a
merge, and rule 14 fires on the odd/even kernel at its branch, not on the split-by-warp one."""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from deepctx.daemon.capture import CaptureResult
from deepctx.daemon.pc_tree import add_pc_samples
from deepctx.daemon.profile_wire import to_message
from deepctx.daemon.store import wire
from deepctx.daemon.tree import CallTree
from deepctx.host import sass
from deepctx.host.frames import Frame
from deepctx.probes.pc_sampling import PCS_ON, Cubin, PcsData, PcsOptions, PcsStatusMessage
from deepctx.profiles.analyzer import analyze
from deepctx.profiles.document import to_doc
from deepctx.profiles.merge import merge_documents

REPO = Path(__file__).resolve().parents[2]
CUBIN = lzma.decompress((REPO / "tests" / "fixtures" / "cubin" / "planted_divergence.sm_90.cubin.xz").read_bytes())
SCHEMA = json.loads((REPO / "docs" / "profile.schema.json").read_text())
CRC = 0xD1
GPU_NS = 1_000_000_000
LANES, WARPS = "_Z13branchy_lanesPfi", "_Z13branchy_warpsPfi"
# (pc, stall, samples): both kernels' paths hold samples on both sides (path_a falls through, path_b is taken)
SAMPLES = {LANES: [(0x500, "wait", 60), (0x600, "selected", 40), (0x1500, "wait", 50), (0x1800, "selected", 40),
                   (0x2140, "long_scoreboard", 10)],
           WARPS: [(0x500, "wait", 60), (0x600, "selected", 40), (0x1500, "wait", 50), (0x1800, "selected", 40),
                   (0x2130, "long_scoreboard", 10)]}
needs_nvdisasm = pytest.mark.skipif(sass.find_nvdisasm() is None,
                                    reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")


def capture(block_x: int = 256) -> dict[str, Any]:
    """Each kernel launched from its own line of train.py (lanes: 10, warps: 20), 4096 blocks of block_x."""
    d = PcsData()
    d.cubins[CRC] = Cubin(CRC, 1, len(CUBIN), bytearray(CUBIN), len(CUBIN))
    stalls: dict[str, int] = {}
    for fn_id, (name, samples) in enumerate(SAMPLES.items(), 1):
        d.names[fn_id] = name
        for pc, stall, n in samples:
            sid = stalls.setdefault(stall, len(stalls) + 1)
            d.stalls[sid] = f"smsp__pcsamp_warps_issue_stalled_{stall}"
            d.samples[(fn_id, CRC, pc, sid)] += n
    d.messages = 1
    d.statuses.append(PcsStatusMessage(PCS_ON, 0, 0, 0, 0, ""))
    t = CallTree("python train.py")
    for line, kernel in ((10, "branchy_lanes(float*, int)"), (20, "branchy_warps(float*, int)")):
        idx = t.node_for([Frame("thread", "python", tid=1), Frame("python", "step", "/srv/train.py", line),
                          Frame("api", "cudaLaunchKernel", module="libcudart.so.13"),
                          Frame("kernel", kernel, launch=(4096, 1, 1, block_x, 1, 1, 0))])
        t.add_at(idx, "gpu_time_ns", GPU_NS)
        t.add_at(idx, "calls", 1)
    out = add_pc_samples(t, d, PcsOptions())
    assert out.warnings == []
    result = CaptureResult(pid=1, command="python train.py", duration_s=1.0, started_unix=0.0, ended="duration",
                           sample_hz=99, tree=t, stats={"device_sm_count": 132, "device_compute_capability": 90})
    return to_doc(to_message(result))


def functions(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    stack = [doc["root"]]
    while stack:
        n = stack.pop()
        stack += n["children"]
        if n["kind"] == "gpu_function":
            out[n["name"]] = n
    return out


@needs_nvdisasm
def test_the_function_node_lists_its_lane_varying_branches() -> None:
    doc = capture()
    jsonschema.validate(doc, SCHEMA)
    fns = functions(doc)
    lanes = fns["branchy_lanes(float*, int)"]["branches"]
    assert [(b["offset"], b["kind"], b["lanes"], b["predicate"], b["source"], b["line"]) for b in lanes] == [
        (0x70, "exit", "varying", "P0", "(c[0x0][RZ] * UR4 + SR_TID.X) >= UR4", 19),
        (0xF0, "branch", "varying", "P0", "(SR_TID.X & 0x1) != 0x1", 22)]
    assert (lanes[1]["taken"], lanes[1]["fallthrough"], lanes[1]["reconverge"], lanes[1]["block_x"]) == (
        [[0x1120, 0x2130]], [[0x100, 0x1120]], 0x2130, 256)
    assert (lanes[0]["taken"], lanes[0]["fallthrough"], lanes[0]["reconverge"]) == ([], [], None)
    # the split-by-warp kernel's path branch is warp-uniform with 256 threads a block: only its guard is listed
    warps = fns["branchy_warps(float*, int)"]["branches"]
    assert [(b["offset"], b["kind"], b["lanes"]) for b in warps] == [(0x70, "exit", "varying")]


@needs_nvdisasm
def test_branches_survive_the_store_wire_and_a_merge() -> None:
    doc = capture()
    again = to_doc(wire.to_message(doc))
    assert functions(again)["branchy_lanes(float*, int)"]["branches"] == \
        functions(doc)["branchy_lanes(float*, int)"]["branches"]
    merged = merge_documents([doc, again])
    assert merged is not None
    assert functions(merged)["branchy_lanes(float*, int)"]["branches"] == \
        functions(doc)["branchy_lanes(float*, int)"]["branches"]
    # the function's resources, which low-occupancy reads, too, where a later window brings the node (a merge
    # once dropped them)
    first = json.loads(json.dumps(doc))
    first["root"]["children"] = []
    later = merge_documents([first, doc])
    assert later is not None
    fn, kept = functions(doc)["branchy_lanes(float*, int)"], functions(later)["branchy_lanes(float*, int)"]
    assert fn["registers"] > 0 and (kept["registers"], kept.get("static_shared")) == (fn["registers"],
                                                                                       fn.get("static_shared"))


@needs_nvdisasm
def test_rule_14_fires_at_the_odd_even_branch_and_not_on_the_split_by_warp_kernel() -> None:
    findings = [f.to_json() for f in analyze(capture(), rules=["warp-divergence"]).findings]
    (f,) = findings
    assert f["location"]["line"] == 10  # the bad kernel's launch
    ev = f["evidence"]
    assert (ev["kernel_line"], ev["instruction"]) == ("planted_divergence.cu:22", "0x00f0 @P0 BRA `(.L_x_5)")
    assert (ev["pc_samples"], ev["stall_samples"], ev["taken_samples"], ev["fallthrough_samples"]) == (
        200, 190, 90, 100)
    assert (ev["stall_share"], ev["lane_source"], ev["reconverge"], ev["block_x"]) == (
        0.95, "(SR_TID.X & 0x1) != 0x1", "0x2130", 256)
    assert ev["removable_ns"] == int(GPU_NS * 0.95 * 0.5)  # both sides' samples, halved: the mean of the two
    assert "h = 0.5" in f["speedup_model"]
    assert f["estimated_speedup"] == 1.9  # T = the capture (1 s): 1 / (1 - 0.475)


@needs_nvdisasm
def test_with_an_unaligned_block_the_split_by_warp_kernel_diverges_too() -> None:
    """48 threads a block: a warp holds tid.x 32..47 of one row and 0..15 of the next, so tid.x & 0x20 varies."""
    findings = [f.to_json() for f in analyze(capture(block_x=48), rules=["warp-divergence"]).findings]
    assert sorted(f["location"]["line"] for f in findings) == [10, 20]
    warps = next(f for f in findings if f["location"]["line"] == 20)["evidence"]
    assert (warps["instruction"], warps["lane_source"], warps["block_x"]) == (
        "0x00e0 @!P0 BRA `(.L_x_1)", "(SR_TID.X & 0x20) != 0", 48)
