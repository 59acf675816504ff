"""The PC-sampling rules (profiles/analyzer/rules/pc_*.py) on constructed profiles: one kernel of known GPU
time launched from a Python line, with PC samples at known instructions; each rule fires on its pattern
with the line, the instruction and the estimate of its stated model, and stays quiet on the others."""

from __future__ import annotations

from typing import Any

import pytest

from deepctx.profiles.analyzer import analyze

GPU_NS = 1_000_000_000  # the kernel is the whole device time: T = its GPU time


def node(kind: str, name: str, children: list[dict[str, Any]] | None = None, file: str | None = None,
         line: int | None = None, **metrics: int) -> dict[str, Any]:
    return {"kind": kind, "name": name, "file": file, "line": line, "module": None, "metrics": metrics,
            "children": children or []}


def profile(kernel: str, instructions: list[tuple[int, str, int, dict[str, int]]],
            sm_count: int = 132, registers: int | None = None, grid: int = 1024, block: int = 256) -> dict[str, Any]:
    """One kernel launched 100 times at train.py:7 with grid x block threads; instructions: (offset, SASS, source
    line, stalls)."""
    lines: dict[int, list[dict[str, Any]]] = {}
    for offset, text, src, stalls in instructions:
        m = {"pc_samples": sum(stalls.values()), **{f"stall_{k}": v for k, v in stalls.items()}}
        lines.setdefault(src, []).append(node("gpu_instruction", f"{offset:#06x}  {text}", line=src, **m))
    fn = node("gpu_function", kernel, [node("gpu_line", f"k.cu:{src}", ins, file="/src/k.cu", line=src)
                                       for src, ins in lines.items()])
    if registers is not None:
        fn.update(registers=registers, static_shared=0)
    k = node("kernel", kernel, [fn], gpu_time_ns=GPU_NS, calls=100)
    k.update(grid=[grid, 1, 1], block=[block, 1, 1], shared_mem=0)
    api = node("api", "cudaLaunchKernel", [k], calls=100, api_time_ns=1_000_000)
    py = node("python", "step", [api], file="/srv/train.py", line=7)
    thread = node("thread", "python", [py])
    thread["tid"] = 42
    root = node("root", "python train.py", [thread])
    metrics = ["cpu_samples", "calls", "api_time_ns", "gpu_time_ns", "bytes", "sync_wait_ns", "pc_samples"]
    return {"schema": "deepctx.profile/v1", "pid": 42, "command": "python train.py", "hostname": "h",
            "started_unix": 0.0, "duration_s": 1.0, "ended": "duration", "sample_hz": 99, "mode": "exact",
            "metrics": metrics, "root": root, "stats": {}, "warnings": [],
            "device": {"name": None, "sm_count": sm_count, "compute_capability": "9.0"}}


def fired(doc: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    a = analyze(doc, rules=[rule])
    return [f.to_json() for f in a.findings]


COPY = [(0x80, "LDG.E R2, desc[UR4][R2.64]", 5, {"selected": 10}),
        (0x90, "FADD R3, R2, R2", 6, {"long_scoreboard": 60, "selected": 10, "long_scoreboard_not_issued": 40}),
        (0xA0, "STG.E desc[UR4][R4.64], R3", 6, {"long_scoreboard": 20})]


def test_long_scoreboard_names_the_line_the_instruction_and_its_estimate() -> None:
    # 132 blocks of 4 warps: 4 resident warps per multiprocessor (of 64) wait on the loads
    doc = profile("_Z4copyPfS_", COPY, grid=132, block=128)
    (f,) = fired(doc, "long-scoreboard")
    assert f["location"] == {"file": "/srv/train.py", "line": 7, "function": "step"}
    assert f["title"] == "copy: 80% of its samples wait on global loads (long scoreboard) at k.cu:6"
    ev = f["evidence"]
    assert (ev["pc_samples"], ev["stall_samples"], ev["kernel_line"], ev["line_stall_samples"]) == (100, 80, "k.cu:6", 80)
    assert (ev["instruction"], ev["instruction_stall_samples"]) == ("0x0090 FADD R3, R2, R2", 60)
    # R = 1 s x 80/100 x 0.5 = 0.4 s of T = 1 s (the device's busy time): 1 / 0.6
    assert ev["removable_ns"] == 400_000_000 and f["estimated_speedup"] == 1.67
    assert "h = 0.5" in f["speedup_model"]
    assert (ev["resident_warps_per_sm"], ev["max_warps_per_sm"], ev["sm_count"]) == (4, 64, 132)


def test_long_scoreboard_not_on_a_kernel_with_warps_enough_to_hide_the_latency() -> None:
    """The same stalls with 8 blocks of 8 warps per multiprocessor (64 of 64): bound by bandwidth, not latency."""
    assert fired(profile("_Z4copyPfS_", COPY, grid=1056, block=256), "long-scoreboard") == []
    # 16 warps of 64 (25%): still few
    assert len(fired(profile("_Z4copyPfS_", COPY, grid=264, block=256), "long-scoreboard")) == 1


def test_not_issued_samples_are_not_counted_twice() -> None:
    """X_not_issued is the subset of X's samples when the scheduler issued nothing: a pc_samples that counted
    them too (as captures before #32.5 did: 110 here) gives the same shares as one that did not."""
    doc = profile("_Z4copyPfS_", COPY, grid=132, block=128)
    fn = doc["root"]["children"][0]["children"][0]["children"][0]["children"][0]["children"][0]
    assert sum(i["metrics"]["pc_samples"] for ln in fn["children"] for i in ln["children"]) == 140
    (f,) = fired(doc, "long-scoreboard")
    assert (f["evidence"]["pc_samples"], f["evidence"]["stall_samples"]) == (100, 80)


def test_uncoalesced_counts_the_queue_the_loads_results_and_the_drain() -> None:
    """lg_throttle at the memory instructions, long_scoreboard on the throttled line, drain at exit: all counted;
    the line and instruction are where the accesses are, not the EXIT that drains them."""
    doc = profile("strided", [(0x230, "LDG.E R3, desc[UR4][R2.64]", 6, {"lg_throttle": 10, "selected": 5}),
                              (0x240, "STG.E desc[UR4][R4.64], R3", 6, {"long_scoreboard": 40, "lg_throttle": 5}),
                              (0x100, "IMAD R4, R5, R3, R4", 5, {"lg_throttle": 5, "long_scoreboard": 10}),
                              (0x300, "EXIT", 7, {"drain": 25})])
    (f,) = fired(doc, "uncoalesced-access")
    ev = f["evidence"]
    assert (ev["stall_samples"], ev["kernel_line"], ev["instruction"]) == (80, "k.cu:6", "0x0240 STG.E desc[UR4][R4.64], R3")
    assert (ev["lg_throttle_share"], ev["drain_share"]) == (0.15, 0.25)
    assert f["estimated_speedup"] == 5.0  # R = 1 s x 0.8 x 1.0
    assert fired(profile("k", [(0x10, "IMAD R4, R5, R3, R4", 6, {"lg_throttle": 90, "selected": 10})]),
                 "uncoalesced-access") == []  # not a memory instruction


def test_uncoalesced_not_on_a_coalesced_bandwidth_bound_kernel() -> None:
    """Waiting on the long scoreboard with a queue that barely throttles (scale_hog, the tiled transpose on the
    H200): not uncoalesced, however long the waits."""
    copy = [(0x80, "LDG.E R2, desc[UR4][R2.64]", 5, {"lg_throttle": 3, "selected": 2}),
            (0x90, "FMUL R3, R2, R5", 5, {"long_scoreboard": 80}), (0xA0, "EXIT", 6, {"drain": 15})]
    assert fired(profile("scale", copy), "uncoalesced-access") == []  # lg_throttle 3% < 5%
    drained = [(0x80, "LDG.E R2, desc[UR4][R2.64]", 5, {"lg_throttle": 6, "selected": 2}),
               (0x90, "FMUL R3, R2, R5", 5, {"long_scoreboard": 82}), (0xA0, "EXIT", 6, {"drain": 10})]
    assert fired(profile("scale", drained), "uncoalesced-access") == []  # queue and drain 16% < 20%


def test_bank_conflicts_on_shared_loads() -> None:
    doc = profile("transpose", [(0x40, "LDS R2, [R3]", 9, {"mio_throttle": 25, "short_scoreboard": 15}),
                                (0x50, "STG.E desc[UR4][R4.64], R2", 10, {"selected": 60})])
    (f,) = fired(doc, "bank-conflicts")
    assert (f["evidence"]["kernel_line"], f["evidence"]["stall_samples"]) == ("k.cu:9", 40)
    assert f["estimated_speedup"] == 1.25  # R = 1 s x 0.4 x 0.5


BRANCHY = [(0x60, "@P0 BRA 0x200", 12, {"branch_resolving": 20, "selected": 20}),
           (0x100, "FFMA R5, R5, R0, 0.5", 13, {"wait": 50, "selected": 10}),  # fall-through side
           (0x200, "FFMA R5, R5, R0, -0.25", 14, {"wait": 30, "selected": 10}),  # taken side
           (0x300, "BSYNC B0", 15, {"wait": 20})]


def with_branch(doc: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The kernel's gpu_function node with one branch fact (docs/formats.md, `branches`)."""
    b = {"offset": 0x60, "instruction": "@P0 BRA 0x200", "file": "/src/k.cu", "line": 12, "kind": "branch",
         "lanes": "varying", "predicate": "P0", "source": "(SR_TID.X & 0x1) != 0x1", "reconverge": 0x300,
         "taken": [[0x200, 0x300]], "fallthrough": [[0x70, 0x200]], "block_x": 256, **fields}
    doc["root"]["children"][0]["children"][0]["children"][0]["children"][0]["children"][0]["branches"] = [b]
    return doc


def test_divergence_at_a_lane_varying_branch_with_samples_on_both_sides() -> None:
    (f,) = fired(with_branch(profile("branchy", BRANCHY)), "warp-divergence")
    ev = f["evidence"]
    assert (ev["kernel_line"], ev["instruction"], ev["lane_source"]) == (
        "k.cu:12", "0x0060 @P0 BRA 0x200", "(SR_TID.X & 0x1) != 0x1")
    assert (ev["fallthrough_samples"], ev["taken_samples"], ev["stall_samples"], ev["pc_samples"]) == (60, 40, 100, 160)
    assert f["estimated_speedup"] == pytest.approx(1 / (1 - 100 / 160 * 0.5), abs=0.01)


def test_divergence_not_on_stalls_alone_nor_on_uniform_unknown_or_one_sided_branches() -> None:
    assert fired(profile("branchy", BRANCHY), "warp-divergence") == []  # no branch facts: stall reasons say nothing
    assert fired(with_branch(profile("branchy", BRANCHY), lanes="unknown"), "warp-divergence") == []
    assert fired(with_branch(profile("branchy", BRANCHY), kind="loop"), "warp-divergence") == []
    # the taken side's 40 samples of 160 moved to the reconvergence point: 0 on that side
    moved = [b for b in BRANCHY if b[0] != 0x200] + [(0x210, "FFMA R5, R5, R0, 1.0", 14, {"wait": 40})]
    assert fired(with_branch(profile("branchy", moved), taken=[[0x200, 0x210]]), "warp-divergence") == []
    # 6 samples of 126 on the taken side (4.8%, under 5%; 7 of 127 is 5.5%): a side that seldom runs costs little
    few = [b for b in BRANCHY if b[0] != 0x200]
    assert fired(with_branch(profile("branchy", few + [(0x200, "FFMA", 14, {"wait": 6})])), "warp-divergence") == []
    assert len(fired(with_branch(profile("branchy", few + [(0x200, "FFMA", 14, {"wait": 7})])), "warp-divergence")) == 1


def test_fp32_fma_fires_on_an_fma_loop_fed_by_shared_memory() -> None:
    """The loop at line 20 (FFMA and the LDS that feed it): issuing, FMA pipe, MIO queue, short scoreboard count;
    the tile's global loads (line 18) and the LDS's barrier wait do not."""
    fma = profile("sgemm_naive", [(0x200, "FFMA R8, R2, R3, R8", 20, {"selected": 25, "math_pipe_throttle": 10}),
                                  (0x210, "LDS R2, [R5]", 20, {"mio_throttle": 20, "short_scoreboard": 10,
                                                               "barrier": 5}),
                                  (0x100, "STS [R13], R6", 18, {"long_scoreboard": 30})])
    (f,) = fired(fma, "fp32-fma")
    assert f["evidence"]["stall_samples"] == 65 and f["evidence"]["kernel_line"] == "k.cu:20"
    assert f["estimated_speedup"] == pytest.approx(1 / (1 - 0.65 * 0.75), abs=0.01)


def test_fp32_fma_not_on_fmas_waiting_for_global_loads_nor_on_register_recurrences() -> None:
    waiting = profile("saxpy", [(0x100, "FFMA R7, R2, UR6, R7", 12, {"long_scoreboard": 90, "selected": 10}),
                                (0x90, "LDS R2, [R5]", 12, {"selected": 5})])
    assert fired(waiting, "fp32-fma") == []
    recurrence = profile("branchy", [(0x100, "FFMA R7, R7, 1.0001, R2", 12, {"wait": 60, "selected": 40})])
    assert fired(recurrence, "fp32-fma") == []  # no shared-memory operands: not a product of tiles


def test_rules_say_why_they_did_not_run_without_samples() -> None:
    doc = profile("k", [])
    doc["root"]["children"][0]["children"][0]["children"][0]["children"][0]["children"] = []
    reports = {r.rule: r for r in analyze(doc).rules}
    for rule in ("long-scoreboard", "uncoalesced-access", "bank-conflicts", "warp-divergence", "fp32-fma",
                 "low-occupancy"):
        assert reports[rule].status == "not_evaluated" and "deepctx run --pc-sampling" in reports[rule].reason


def test_occupancy_from_block_size_and_shared_memory() -> None:
    from deepctx.profiles.analyzer.occupancy import Occupancy, occupancy

    assert occupancy(256, 96 << 10, "9.0") == Occupancy(2, 16, 0.25, "shared memory")  # (228 KiB) // (97 KiB)
    assert occupancy(256, 4, "9.0") == Occupancy(8, 64, 1.0, "warps")
    assert occupancy(32, 0, "8.6") == Occupancy(16, 16, 0.333, "blocks")
    assert occupancy(256, 0, "6.1") is None  # no table: not guessed
    # 128 registers: 4096 per warp, 16 warps of 64 fit, two blocks of 8 warps
    assert occupancy(256, 0, "9.0", registers=128) == Occupancy(2, 16, 0.25, "registers")
    assert occupancy(256, 0, "9.0", registers=24) == Occupancy(8, 64, 1.0, "warps")  # 768 per warp: 10 blocks


def test_low_occupancy_from_shared_memory_with_latency_stalls() -> None:
    doc = profile("scale_hog", [(0x80, "LDG.E R2, desc[UR4][R2.64]", 9, {"selected": 20}),
                                (0x90, "FMUL R3, R2, R5", 9, {"long_scoreboard": 60, "selected": 20})])
    doc["root"]["children"][0]["children"][0]["children"][0]["children"][0]["shared_mem"] = 96 << 10
    (f,) = fired(doc, "low-occupancy")
    ev = f["evidence"]
    assert (ev["occupancy_upper_bound"], ev["limited_by"], ev["resident_warps"]) == (0.25, "shared memory", 16)
    assert ev["registers_per_thread"] is None and ev["latency_stall_share"] == 0.6
    assert f["estimated_speedup"] == 1.43  # R = 1 s x 0.6 x 0.5
    assert fired(profile("scale", [(0x90, "FMUL R3, R2, R5", 9, {"long_scoreboard": 60, "selected": 20})]),
                 "low-occupancy") == []  # no shared memory: full occupancy


def test_low_occupancy_from_the_cubins_registers() -> None:
    doc = profile("regs_hog", [(0x90, "FMUL R3, R2, R5", 9, {"long_scoreboard": 50, "selected": 50})], registers=128)
    (f,) = fired(doc, "low-occupancy")
    ev = f["evidence"]
    assert (ev["limited_by"], ev["registers_per_thread"], ev["occupancy_upper_bound"]) == ("registers", 128, 0.25)
    assert "its 128 registers per thread" in f["suggestion"] and "registers unknown" not in f["speedup_model"]


def test_small_grid_carries_pc_evidence() -> None:
    doc = profile("reduce_rows", [(0x40, "LDG.E R2, desc[UR4][R2.64]", 8, {"long_scoreboard": 70, "selected": 5}),
                                  (0x50, "FADD R3, R2, R3", 9, {"selected": 25})])
    doc["root"]["children"][0]["children"][0]["children"][0]["children"][0]["grid"] = [8, 1, 1]
    (f,) = fired(doc, "small-grid")
    ev = f["evidence"]
    assert (ev["grid_blocks"], ev["sm_count"], ev["sm_count_source"]) == (8, 132, "profile")
    assert ev["pc_samples"] == 100 and ev["kernel_line"] == "k.cu:8"
    assert ev["top_stalls"] == {"long_scoreboard": 70, "selected": 30}
