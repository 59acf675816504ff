"""Rule: the GPU idles while the main thread is busy with Python/CPU work that launches nothing."""

from __future__ import annotations

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import cpu_ns, site_text, sites_with_gpu_calls

MIN_IDLE_SHARE = 0.2  # a GPU busy 80% of the time is not waiting for the host
MIN_HOST_SHARE = 0.5  # the main thread works (not waits) at least half the time
MAX_LINES = 3


@register
class HostBoundStep(Rule):
    id = "host-bound-step"
    number = 1
    title = "GPU idle while the host is busy"
    needs = "device"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis, lim = ctx.index, ctx.basis, ctx.limits
        dev = basis.device
        idle = basis.gpu_idle_ns
        if idle is None:  # the device's busy time is unknown
            return NotEvaluated("the profile has no device activity (no gpu_time_ns, no trace), so the GPU's idle "
                                "time is unknown; capture with the CUPTI agent (deepctx run, or attach --gpu-activity)")
        if basis.time_ns <= 0 or basis.main_tid not in idx.threads:
            return NotEvaluated("the profile has no CPU samples of the main thread")
        main = idx.threads[basis.main_tid]
        host_ns = cpu_ns(idx, main.samples - main.api_samples)
        if idle < MIN_IDLE_SHARE * basis.time_ns or host_ns < MIN_HOST_SHARE * basis.time_ns:
            return []
        gpu_sites = sites_with_gpu_calls(idx)
        lines = []
        for (tid, site), g in idx.samples.items():
            if tid != basis.main_tid or site is None or site in gpu_sites:
                continue
            ns = cpu_ns(idx, g.samples - g.api_samples - g.loader_samples - g.compile_samples)
            if ns >= lim.min_share * basis.time_ns:
                lines.append((ns, site))
        lines.sort(key=lambda x: (-x[0], x[1].file or "", x[1].line or 0))
        out = []
        for ns, site in lines[:MAX_LINES]:
            removable = min(ns, idle)
            out.append(Finding(
                rule=self.id, title=f"GPU idle {idle / basis.time_ns:.0%} of the time while the host runs this line",
                site=site,
                evidence={"host_time_ns": ns, "share_of_time": basis.share(ns), "gpu_busy_ns": dev.busy_ns,
                          "gpu_idle_ns": idle, "gpu_idle_share": basis.share(idle), "device_time": dev.source,
                          "main_thread_cpu_ns": host_ns},
                suggestion=(f"{site_text(site)} runs on the CPU for {ns / 1e6:.0f} ms and launches no GPU work, "
                            "while the GPU has nothing queued. Take it off the step's critical path: compute it "
                            "with tensor operations on the GPU, compute it once before the loop, or move it to a "
                            "DataLoader worker or a background thread so it overlaps with GPU work."),
                estimated_speedup=basis.speedup(removable), confidence=0.7 if dev.source == "trace" else 0.5,
                model="host-bound: R = min(CPU time of the line, GPU idle time); speedup = T/(T-R)",
                removable_ns=int(removable)))
        return out
