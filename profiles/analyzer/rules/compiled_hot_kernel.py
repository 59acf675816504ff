"""Rule: one kernel of torch.compile'd code takes a large share of the GPU's time (issue 33.4): a lead to its
model lines, not a claim (what would make it faster is not in the profile without PC samples)."""

from __future__ import annotations

from collections import defaultdict

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import launches
from deepctx.profiles.tree import origin_lines

HOT_SHARE = 0.25  # of the GPU's kernel time


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
            out.append(Finding(
                rule=self.id, title=f"{name} ({100 * gpu / total:.0f}% of kernel time) came from {where}",
                site=Site(first["file"], first["line"], first["function"]),
                evidence={"kernel": name, "gpu_time_ns": gpu, "gpu_share": round(gpu / total, 4),
                          "launches": sum(r.calls for r in rs), "lines": where, "aten": cf.get("aten", []),
                          "compile_id": cf.get("compile_id")},
                suggestion=(f"This fused kernel runs {', '.join(cf.get('aten') or cf.get('nodes') or []) or 'the operations'}"
                            f" of {where}. Profile it inside (deepctx run --pc-sampling --kernel '{name}') for its "
                            "stalls" + (", or let Inductor search its configurations "
                                        "(torch.compile(mode='max-autotune'))." if cf.get("framework") != "xla" else
                                        ", and check that XLA autotuned it (XLA_FLAGS --xla_gpu_autotune_level).")),
                estimated_speedup=None, confidence=0.3,
                model="a lead: the kernel's share of GPU time is measured; what a change would gain is not",
                removable_ns=0))
        return out
