"""Rule: kernels launched with fewer blocks than the GPU has multiprocessors, hot enough to matter."""

from __future__ import annotations

from collections import defaultdict

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.names import is_bounded_work_kernel, short_kernel_name
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import launches, site_text
from deepctx.profiles.analyzer.rules.pc_common import pc_evidence

LONG_KERNEL_NS = 20_000  # shorter kernels are a launch-overhead matter, not an occupancy one


@register
class SmallGrid(Rule):
    id = "small-grid"
    number = 9
    title = "kernels with fewer blocks than multiprocessors"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis, lim, sms = ctx.index, ctx.basis, ctx.limits, ctx.device.sm_count
        measured = idx.has_gpu_time
        groups: dict[tuple[Site | None, str], list[GpuRecord]] = defaultdict(list)
        steady = launches(idx)
        for r in steady:
            if r.blocks is not None and r.blocks < sms:
                groups[(r.ctx.site, r.name)].append(r)
        total = sum(r.calls for r in steady)
        out = []
        for (site, name), recs in groups.items():
            n = sum(r.calls for r in recs)
            if n < lim.loop_calls:
                continue
            blocks = max(r.blocks or 0 for r in recs)
            gpu_ns = sum(r.gpu_time_ns for r in recs)
            idle_sms = 1 - blocks / sms
            evidence: dict[str, object] = {
                "kernel": short_kernel_name(name), "launches": n, "grid_blocks": blocks,
                "threads_per_block": max((r.threads or 0) // max(1, r.blocks or 1) for r in recs),
                "sm_count": sms, "sm_count_source": ctx.device.source, "idle_sm_share": round(idle_sms, 3),
            }
            evidence.update(pc_evidence(recs))
            confidence = 0.6 if measured else 0.3
            if ctx.device.assumed:
                confidence -= 0.1
            if measured:
                if gpu_ns / n < LONG_KERNEL_NS:
                    continue
                removable = gpu_ns * idle_sms
                evidence.update(gpu_time_ns=gpu_ns, mean_gpu_ns=gpu_ns // n)
                speedup = basis.speedup(removable)
                model = ("occupancy: R = kernel GPU time x (1 - blocks/multiprocessors), the time if the work "
                         "spread over every multiprocessor; speedup = T/(T-R), an upper bound")
            else:
                if is_bounded_work_kernel(name) or n / total < lim.min_share:
                    continue  # short by construction, or too rare to matter without GPU time
                removable, speedup = 0, None
                model = "not estimated: GPU time not measured, so whether the kernel runs long is unknown"
            out.append(Finding(
                rule=self.id, title=f"{short_kernel_name(name, 60)} runs {blocks} blocks on {sms} multiprocessors",
                site=site, evidence=evidence,
                suggestion=(f"{site_text(site)} launches {short_kernel_name(name, 60)} with {blocks} blocks, so "
                            f"{idle_sms:.0%} of the GPU's multiprocessors idle while it runs. Spread the work over "
                            "more blocks (a smaller block size, a split-K or split reduction, a larger Triton grid), "
                            "batch several calls into one launch, or run independent work on another stream."),
                estimated_speedup=speedup, confidence=confidence, model=model, removable_ns=int(removable)))
        return out
