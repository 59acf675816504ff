"""Rule: GPU (or pinned host) memory allocated and freed again and again in steady state."""

from __future__ import annotations

from collections import Counter

from deepctx.profiles.analyzer import apis
from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import site_text, steady


def _where(records: list[GpuRecord]) -> Counter[Site | None]:
    c: Counter[Site | None] = Counter()
    for r in records:
        c[r.ctx.site] += r.calls
    return c


@register
class AllocationChurn(Rule):
    id = "allocation-churn"
    number = 5
    title = "memory allocated and freed in every step"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis, lim = ctx.index, ctx.basis, ctx.limits
        recs = [r for r in steady(idx.gpu) if r.kind == "api" and r.api_class in (apis.ALLOC, apis.FREE) and r.calls]
        out = []
        for memory in ("device", "host"):
            mine = [r for r in recs if ("Host" in r.api) == (memory == "host")]
            allocs = [r for r in mine if r.api_class == apis.ALLOC]
            frees = [r for r in mine if r.api_class == apis.FREE]
            n_alloc, n_free = sum(r.calls for r in allocs), sum(r.calls for r in frees)
            if min(n_alloc, n_free) < lim.loop_calls:
                continue
            removable = sum(r.api_time_ns for r in mine)
            free_sites, alloc_sites = _where(frees), _where(allocs)
            # the fix goes where memory is given back (that is what forces the next allocation)
            site = free_sites.most_common(1)[0][0]
            evidence: dict[str, object] = {
                "memory": memory, "allocations": n_alloc, "frees": n_free, "bytes_allocated": sum(r.bytes for r in allocs),
                "alloc_free_time_ns": removable,
                "alloc_sites": [{"at": s.label() if s else None, "calls": c} for s, c in alloc_sites.most_common(3)],
                "free_sites": [{"at": s.label() if s else None, "calls": c} for s, c in free_sites.most_common(3)],
            }
            if memory == "device":
                fix = ("Memory goes back to the driver and is allocated again every step: remove "
                       "torch.cuda.empty_cache() from the loop, keep tensor shapes stable (pad variable sizes to a "
                       "few buckets), and consider PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; in JAX keep "
                       "the default preallocating allocator.")
            else:
                fix = "Pinned host buffers are allocated and freed repeatedly: allocate them once and reuse them."
            out.append(Finding(
                rule=self.id, title=f"{n_alloc} {memory} allocations and {n_free} frees while the program runs",
                site=site, evidence=evidence, suggestion=f"{site_text(site)}: {fix}",
                estimated_speedup=basis.speedup(removable), confidence=0.6,
                model="allocator: R = time inside allocation and free calls (cudaFree also waits for the GPU); "
                      "speedup = T/(T-R), an upper bound",
                removable_ns=int(removable)))
        return out
