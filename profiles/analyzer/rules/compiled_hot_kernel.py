"""Rule: one kernel of torch.compile'd code takes a large share of the GPU's time (issue 33.4), named with the
model lines fused into it.

Its estimate is the kernel's distance from its memory floor. Inductor's wrapper gives each launch's least bytes
(`compiled_from.bytes_per_launch`: every tensor it takes read once, every one it writes written once) and NVML
the memory's peak bandwidth (the profile's `device.memory_bandwidth_gb_s`). No launch runs faster than its bytes
at the bandwidth a streaming copy reaches (STREAM_SHARE of the peak), so the time above that floor is what a
better kernel could remove, at most: R = kernel time - least bytes / (STREAM_SHARE x peak). Where either figure
is missing the finding stays a lead without an estimate."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import launches
from deepctx.profiles.tree import origin_lines

HOT_SHARE = 0.25  # of the GPU's kernel time
# The share of NVML's peak bandwidth a streaming copy reaches, the fastest a kernel moves bytes in practice: 0.897
# for a copy and 0.898 for an elementwise kernel on an H100 (bench/stream_bandwidth.py; BENCHMARKS.md,
# "compiled-hot-kernel's memory floor"); not measured on other GPUs
STREAM_SHARE = 0.9
AT_FLOOR = 0.9  # a kernel within this of its floor's speed runs at it: only fewer bytes help


@register
class CompiledHotKernel(Rule):
    id = "compiled-hot-kernel"
    number = 20
    title = "a kernel of compiled code that dominates GPU time"
    needs = "device"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx = ctx.index
        if not idx.has_gpu_time:
            return NotEvaluated("no device time in the profile (device activity: `deepctx run` or --gpu-activity)")
        recs = launches(idx)
        total = sum(r.gpu_time_ns for r in recs)
        by_kernel: dict[str, list[GpuRecord]] = defaultdict(list)
        for r in recs:
            if r.compiled_from and r.compiled_from.get("lines"):
                by_kernel[r.name].append(r)
        out = []
        for name, rs in by_kernel.items():
            gpu = sum(r.gpu_time_ns for r in rs)
            if not total or gpu < HOT_SHARE * total:
                continue
            cf = max(rs, key=lambda r: r.gpu_time_ns).compiled_from or {}
            first = cf["lines"][0]
            where = origin_lines(cf)
            calls = sum(r.calls for r in rs)
            evidence: dict[str, object] = {
                "kernel": name, "gpu_time_ns": gpu, "gpu_share": round(gpu / total, 4), "launches": calls,
                "lines": where, "aten": cf.get("aten", []), "compile_id": cf.get("compile_id")}
            ops = ", ".join(cf.get("aten") or cf.get("nodes") or []) or "the operations"
            floor = _memory_floor(rs, ctx.device.memory_bandwidth)
            title = f"{name} ({100 * gpu / total:.0f}% of kernel time) came from {where}"
            if floor is None:
                removable, speedup, confidence = 0.0, None, 0.3
                model = ("a lead: the kernel's share of GPU time is measured; its least bytes (Inductor's wrapper) or "
                         "the memory's bandwidth (NVML) are not in the profile")
                advice = f"Profile it inside (deepctx run --pc-sampling --kernel '{name}') for its stalls, or " + \
                    _tuning(cf)
            else:
                floor_ns, moved, peak = floor
                removable = max(0.0, gpu - floor_ns)
                speedup, confidence = ctx.basis.speedup(removable), 0.4
                share = moved / (gpu / 1e9) / peak
                evidence.update(bytes_per_launch=moved // max(calls, 1), achieved_gb_s=round(moved / gpu, 1),
                                peak_gb_s=round(peak / 1e9, 1), share_of_peak=round(share, 3),
                                floor_ns=int(floor_ns), removable_ns=int(removable))
                model = (f"memory floor: R = kernel time - least bytes / ({STREAM_SHARE:g} x the memory's peak "
                         "bandwidth); speedup = T/(T-R)")
                title += f", at {100 * share:.0f}% of the memory's peak bandwidth"
                if share >= AT_FLOOR * STREAM_SHARE:
                    advice = ("It moves its bytes near the memory's limit: only fewer bytes make it faster (a narrower "
                              "dtype such as bf16, or fusing the producer or consumer of its tensors into it).")
                else:
                    advice = (f"It moves its bytes at {100 * share:.0f}% of the memory's peak: profile it inside "
                              f"(deepctx run --pc-sampling --kernel '{name}') for what holds it back, or "
                              + _tuning(cf))
            out.append(Finding(
                rule=self.id, title=title, site=Site(first["file"], first["line"], first["function"]),
                evidence=evidence,
                suggestion=f"This fused kernel runs {ops} of {where}. " + advice,
                estimated_speedup=speedup, confidence=confidence, model=model, removable_ns=int(removable)))
        return out


def _tuning(cf: dict[str, Any]) -> str:
    if cf.get("framework") == "xla":
        return "check that XLA autotuned it (XLA_FLAGS --xla_gpu_autotune_level)."
    # not mode="max-autotune": it also records CUDA graphs, whose input copies doubled the example kernel's traffic
    # on the H100 (0.52x: BENCHMARKS.md, "compiled-hot-kernel's memory floor")
    return "let Inductor search its configurations (torch.compile(mode='max-autotune-no-cudagraphs'))."


def _memory_floor(rs: list[GpuRecord], peak: float | None) -> tuple[float, int, float] | None:
    """(the launches' least time in ns at STREAM_SHARE of the peak, their least bytes, the peak in bytes/s), or
    None where the bandwidth or a launch's bytes is not known."""
    if not peak:
        return None
    moved = 0
    for r in rs:
        per = (r.compiled_from or {}).get("bytes_per_launch")
        if not isinstance(per, int) or per <= 0:
            return None
        moved += per * r.calls
    return moved / (STREAM_SHARE * peak) * 1e9, moved, peak
