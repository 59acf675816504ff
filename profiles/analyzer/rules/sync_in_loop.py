"""Rule: the host waits for the GPU over and over from one line (.item(), .cpu(), print(tensor),
torch.cuda.synchronize() in the step), so host work cannot overlap with GPU work."""

from __future__ import annotations

from collections import Counter

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import Site
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.blocking_copy import BlockingCopy
from deepctx.profiles.analyzer.rules.common import by_site, pure_host_ns, site_text, steady


def upload_sites(ctx: Context) -> set[Site | None]:
    """Lines whose waits the blocking-copy rule reports, as blocking host-to-device copies: exactly those, so
    a wait is reported by one rule or the other, never by neither."""
    return {f.site for f in BlockingCopy().findings(ctx) if f.evidence["direction"] == "HtoD"}


@register
class SyncInLoop(Rule):
    id = "sync-in-loop"
    number = 3
    title = "the host waits for the GPU in the loop"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis, lim = ctx.index, ctx.basis, ctx.limits
        skip = upload_sites(ctx)
        overlappable = pure_host_ns(idx, basis.main_tid)
        idle = basis.gpu_idle_ns
        out = []
        for site, recs in by_site(steady(idx.gpu)).items():
            syncs = [r for r in recs if r.kind == "sync" and r.calls]
            n = sum(r.calls for r in syncs)
            if n < lim.loop_calls or site in skip:
                continue
            wait = sum(r.sync_wait_ns for r in syncs)
            reads = [r for r in recs if r.kind == "memcpy" and r.name == "DtoH"]
            n_reads = sum(r.calls for r in reads)
            removable = min(wait, overlappable) if idle is None else min(wait, overlappable, idle)
            apis: Counter[str] = Counter()
            for r in syncs:
                apis[r.api] += r.calls
            evidence: dict[str, object] = {
                "syncs": n, "sync_wait_ns": wait, "mean_wait_ns": wait // n, "apis": dict(apis.most_common()),
                "reads_to_host": n_reads, "bytes_read": sum(r.bytes for r in reads),
                "overlappable_host_ns": overlappable,
            }
            model = "sync: R = min(wait at the line, main-thread CPU time at lines without GPU work"
            if idle is not None:
                evidence["gpu_idle_ns"] = idle
                model += ", GPU idle time"
            model += "); speedup = T/(T-R), an upper bound"
            if n_reads * 2 >= n:
                what = f"reads a GPU value on the host {n_reads} times (.item(), .cpu(), .tolist() or print)"
                fix = ("Keep the value on the GPU (e.g. total += loss.detach()) and read it once every N steps or "
                       "after the loop; log with a delay instead of every step.")
            else:
                what = f"waits for the GPU {n} times"
                fix = ("Remove torch.cuda.synchronize() (or stream/event waits) from the loop; time steps with "
                       "torch.cuda.Event(enable_timing=True) and read the times after the loop.")
            out.append(Finding(
                rule=self.id, title=f"{n} waits for the GPU from one line in the loop", site=site, evidence=evidence,
                suggestion=(f"{site_text(site)} {what}; each wait drains the GPU's queue, so the host's next work "
                            f"cannot overlap with GPU work. {fix}"),
                estimated_speedup=basis.speedup(removable), confidence=0.6, model=model,
                removable_ns=int(removable)))
        return out
