"""Rule: many kernels from one line that are shorter than the host's cost of launching them."""

from __future__ import annotations

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.names import is_bounded_work_kernel
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import (
    ASSUMED_TINY_KERNEL_NS,
    ONE_WAVE_THREADS_PER_SM,
    by_site,
    launch_cost,
    launch_evidence,
    launches,
    site_text,
)
from deepctx.profiles.analyzer.rules.unfused_optimizer import optimizer_launch


@register
class LaunchBound(Rule):
    id = "launch-bound-loop"
    number = 2
    title = "kernels shorter than their launch cost"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis, lim = ctx.index, ctx.basis, ctx.limits
        one_wave = ctx.device.sm_count * ONE_WAVE_THREADS_PER_SM
        idle = basis.gpu_idle_ns
        out = []
        # an optimizer step's launches get the framework's fix (unfused-optimizer), not generic batching advice
        for site, recs in by_site(r for r in launches(idx) if not optimizer_launch(r)).items():
            cost = launch_cost(idx, site, recs)
            n, per_launch, measured = cost.launches, cost.per_launch_ns, cost.measured
            if n < lim.launch_bound_launches:
                continue
            if measured:
                tiny = recs
                kernel_ns = cost.gpu_ns / n
            else:
                # without GPU time only kernels with bounded work per thread are known to be short
                tiny = [r for r in recs if r.threads is not None and r.threads <= one_wave
                        and is_bounded_work_kernel(r.name)]
                kernel_ns = ASSUMED_TINY_KERNEL_NS
            n_tiny = sum(r.calls for r in tiny)
            if n_tiny < lim.launch_bound_launches or kernel_ns >= per_launch:
                continue
            removable = cost.removable_ns(n_tiny, kernel_ns, idle)
            evidence = launch_evidence(cost, recs, kernel_ns)
            evidence["largest_grid_blocks"] = max((r.blocks or 0) for r in recs)
            if measured:
                model = ("launch: R = min(launches x (host time per launch - GPU time per launch), GPU idle time); "
                         "speedup = T/(T-R)")
            else:
                evidence["one_wave_launches"] = n_tiny
                model = ("launch: R = one-wave launches x (host time per launch - assumed 2 µs per kernel); "
                         "speedup = T/(T-R); GPU time not measured")
            out.append(Finding(
                rule=self.id, title=f"{n} kernel launches from one line, each shorter than its launch",
                site=site, evidence=evidence,
                suggestion=(f"{site_text(site)} launches {n} small kernels one at a time and the GPU waits for "
                            "the host. Batch the loop into one tensor operation, or wrap the step in "
                            "torch.compile (mode=\"reduce-overhead\" also captures it in a CUDA graph), or "
                            "capture it with torch.cuda.CUDAGraph and replay it."),
                estimated_speedup=basis.speedup(removable), confidence=0.8 if measured else 0.5, model=model,
                removable_ns=int(removable)))
        return out
