"""Rule: warp divergence (docs/analyzer.md, rule 14), found by data flow on the SASS and confirmed by samples.

A PC sample has no active-thread mask, and a diverged warp runs each path as ordinary instructions, so stall
reasons cannot show divergence. The daemon's data flow over the kernel's SASS (host/sass_uniformity.py) lists
the conditional branches whose predicate differs between a warp's lanes (a gpu_function node's `branches`),
with the instructions only the taken and only the fall-through path run. Where both sides hold samples, a warp
ran both paths one after the other: the samples measure what that costs.

Model: a warp that splits at a two-way lane-varying branch runs both sides, a + b; with the condition uniform
per warp each warp runs one side, and with the lanes split evenly between the paths half of the warps run
each: the region's cost drops to the mean (a + b) / 2. So R = G x (a + b) / S x 1/2 (h = 0.5, with a and b
the sides' samples, S the kernel's), speedup T / (T - R), the kernel's own G / (G - R)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.names import short_kernel_name
from deepctx.profiles.analyzer.registry import Context, register
from deepctx.profiles.analyzer.rules.common import site_text
from deepctx.profiles.analyzer.rules.pc_common import MIN_SAMPLES, PcStallRule

MIN_SIDE = 0.05  # of the kernel's samples, on each side: a side that rarely runs costs little when split
HIDE = 0.5  # the region's cost drops to the mean of its two sides (lanes split evenly, paths independent)


def _in(offset: int, ranges: list[list[int]]) -> bool:
    return any(start <= offset < end for start, end in ranges)


def _where(b: dict[str, Any]) -> str:
    base = (b.get("file") or "").rsplit("/", 1)[-1]
    return f"{base}:{b['line']}" if b.get("line") is not None else "[no line info]"


@register
class Divergence(PcStallRule):
    id = "warp-divergence"
    number = 14
    title = "warp divergence"
    min_share = 0.15  # both sides together, of the kernel's samples
    hide = HIDE
    model_note = ("a warp split by a lane-varying branch runs both sides; uniform per warp, each warp runs one: "
                  "the region drops to the mean of its sides (lanes split evenly, paths independent)")
    fix = ("the branch at {line} ({instruction}) depends on {source}, which differs between the lanes of a "
           "warp, so each warp of {kernel} runs both paths one after the other. Make the condition uniform "
           "per warp: split the work by warp (threadIdx.x / 32) or sort or bucket it so that a warp's 32 "
           "threads take the same path; or, for short paths, compute both sides and select.")

    def _finding(self, ctx: Context, site: Site | None, name: str, recs: list[GpuRecord]) -> Finding | None:
        pcs = [r.pcs for r in recs if r.pcs is not None]
        samples: dict[tuple[str, int], int] = defaultdict(int)
        for p in pcs:
            for i in p.instructions:
                samples[(i.function, i.offset)] += i.samples
        total = sum(samples.values())
        branches = {(fn, b["offset"]): (fn, b) for p in pcs for fn, b in p.branches
                    if b.get("lanes") == "varying" and b.get("kind") == "branch"}
        best = None
        for fn, b in branches.values():
            a = sum(n for (f, o), n in samples.items() if f == fn and _in(o, b.get("taken") or []))
            f_ = sum(n for (f, o), n in samples.items() if f == fn and _in(o, b.get("fallthrough") or []))
            if (total and a + f_ >= MIN_SAMPLES and min(a, f_) / total >= MIN_SIDE
                    and (a + f_) / total >= self.min_share and (best is None or a + f_ > best[2] + best[3])):
                best = (fn, b, a, f_)
        if best is None:
            return None
        fn, b, taken, fall = best
        share = (taken + fall) / total
        kernel = short_kernel_name(name, 60)
        line, instruction = _where(b), f"{b['offset']:#06x} {b['instruction']}"
        evidence: dict[str, object] = {
            "kernel": kernel, "pc_samples": total, "stall_samples": taken + fall, "stall_share": round(share, 3),
            "kernel_line": line, "instruction": instruction, "predicate": b.get("predicate"),
            "lane_source": b.get("source"), "taken_samples": taken, "taken_share": round(taken / total, 3),
            "fallthrough_samples": fall, "fallthrough_share": round(fall / total, 3),
            "reconverge": f"{b['reconverge']:#06x}" if b.get("reconverge") is not None else None,
            "block_x": b.get("block_x"),
        }
        gpu_ns = sum(r.gpu_time_ns for r in recs)
        if gpu_ns:
            removable = gpu_ns * share * self.hide
            evidence.update(gpu_time_ns=gpu_ns, removable_ns=int(removable))
            speedup, confidence = ctx.basis.speedup(removable), 0.5
            model = ("PC samples on the two sides a, b of a lane-varying branch (SASS data flow): R = kernel GPU "
                     f"time x (a + b) / kernel samples x h, h = {self.hide:g} ({self.model_note}); "
                     "speedup = T/(T-R)")
        else:
            removable, speedup, confidence = 0, None, 0.3
            model = "not estimated: the kernel's GPU time was not measured"
        where = {"kernel": kernel, "line": line, "instruction": instruction, "source": b.get("source") or "?"}
        return Finding(
            rule=self.id, site=site, evidence=evidence,
            title=f"{kernel}: its warps run both sides of the lane-varying branch at {line} ({share:.0%} of its "
                  "samples)",
            suggestion=f"{site_text(site)} launches {kernel}; " + self.fix.format(**where),
            estimated_speedup=speedup, confidence=confidence, model=model, removable_ns=int(removable))
