"""Rule: collectives (NCCL/RCCL) that run while no compute kernel does, so communication adds to the step."""

from __future__ import annotations

from collections import Counter

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.names import is_collective_kernel
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import site_text, steady
from deepctx.profiles.analyzer.timing import device_events, merge, overlap

MIN_EXPOSED_SHARE = 0.5  # past half overlapped, the code overlaps already; the rest is the last bucket's tail


@register
class CollectiveNotOverlapped(Rule):
    id = "collective-not-overlapped"
    number = 10
    title = "collectives not overlapped with compute"
    needs = "timeline"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis = ctx.index, ctx.basis
        calls = [r for r in steady(idx.gpu) if r.kind == "api" and r.api_class == "collective" and r.calls]
        if not calls:
            return []
        n = sum(r.calls for r in calls)
        events = device_events(idx.doc)
        if not events:
            return NotEvaluated(f"{n} collective calls, but the profile has no timeline of device activity "
                                "(capture with --trace and the CUPTI agent), so their overlap with compute is unknown")
        names = {r.name for r in idx.gpu if r.kind == "kernel" and r.ctx.collective}
        coll: dict[int, list[tuple[int, int]]] = {}
        comp: dict[int, list[tuple[int, int]]] = {}
        for e in events:
            if e["kind"] != "kernel":
                continue
            span = (int(e["start_ns"]), int(e["start_ns"]) + int(e["dur_ns"]))
            is_coll = e["name"] in names or is_collective_kernel(e["name"])
            (coll if is_coll else comp).setdefault(int(e.get("device") or 0), []).append(span)
        coll_ns = exposed = compute_free = 0
        for dev, spans in coll.items():
            c = merge(spans)
            k = merge(comp.get(dev, []))
            both = overlap(c, k)
            total = sum(hi - lo for lo, hi in c)
            coll_ns += total
            exposed += total - both
            compute_free += sum(hi - lo for lo, hi in k) - both
        if not coll_ns or exposed < MIN_EXPOSED_SHARE * coll_ns:
            return []
        removable = min(exposed, compute_free)  # communication can only hide behind compute that exists
        site = Counter(r.ctx.site for r in calls).most_common(1)[0][0]
        ops = Counter()
        for r in calls:
            ops[r.name] += r.calls
        return [Finding(
            rule=self.id, title=f"{exposed / coll_ns:.0%} of collective time runs with no compute beside it",
            site=site,
            evidence={"collectives": dict(ops.most_common()), "bytes": sum(r.bytes for r in calls),
                      "collective_gpu_ns": coll_ns, "exposed_ns": exposed, "overlapped_share": round(1 - exposed / coll_ns, 3),
                      "compute_not_overlapped_ns": compute_free},
            suggestion=(f"{site_text(site)} runs {', '.join(ops)} while the compute stream idles. Start each "
                        "collective as soon as its input is ready with async_op=True and call work.wait() just "
                        "before the result is needed, so it overlaps with the remaining compute; "
                        "DistributedDataParallel does this per gradient bucket (check bucket_cap_mb), FSDP with "
                        "forward/backward prefetch."),
            estimated_speedup=basis.speedup(removable), confidence=0.7,
            model="overlap: R = min(collective time with no compute kernel running, compute time with no collective "
                  "running); speedup = T/(T-R)",
            removable_ns=int(removable))]
