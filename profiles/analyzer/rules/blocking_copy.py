"""Rule: host-to-device (and large device-to-host) copies the host waits for: synchronous copy calls, or
copies followed by a stream synchronization (.to(device) without non_blocking=True), likely from pageable
memory."""

from __future__ import annotations

from collections import Counter, defaultdict

from deepctx.profiles.analyzer import apis
from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import by_site, site_text, steady

ASSUMED_PAGEABLE_BYTES_PER_S = 10e9  # copies from pageable memory: about 10 GB/s
ASSUMED_PINNED_BYTES_PER_S = 25e9  # copies from pinned memory: PCIe 4 x16 in practice (PCIe 5 does twice that)
LARGE_READ_BYTES = 64 << 10  # device-to-host copies below this are values read back (sync-in-loop's)


@register
class BlockingCopy(Rule):
    id = "blocking-copy"
    number = 4
    title = "copies the host waits for (pageable or synchronous)"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        return self.findings(ctx)

    def findings(self, ctx: Context) -> list[Finding]:
        idx, lim = ctx.index, ctx.limits
        out = []
        for site, recs in by_site(steady(idx.gpu)).items():
            syncs = [r for r in recs if r.kind == "sync"]
            n_sync = sum(r.calls for r in syncs)
            groups: dict[str, list[GpuRecord]] = defaultdict(list)
            for r in recs:
                if r.kind == "memcpy" and r.name in ("HtoD", "DtoH") and r.calls:
                    groups[r.name].append(r)
            for direction, copies in groups.items():
                f = self._finding(ctx, site, direction, copies, syncs, n_sync)
                if f is not None and sum(r.calls for r in copies) >= lim.loop_calls:
                    out.append(f)
        return out

    def _finding(self, ctx: Context, site: Site | None, direction: str, copies: list[GpuRecord],
                 syncs: list[GpuRecord], n_sync: int) -> Finding | None:
        basis = ctx.basis
        n = sum(r.calls for r in copies)
        nbytes = sum(r.bytes for r in copies)
        if direction == "DtoH" and nbytes / n < LARGE_READ_BYTES:
            return None
        api_calls: Counter[str] = Counter()
        for r in copies:
            api_calls[r.api] += r.calls
        sync_api = [a for a in api_calls if apis.is_synchronous_copy(a)]
        waited = n_sync * 2 >= n
        if not sync_api and not waited:
            return None
        measured = sum(r.gpu_time_ns for r in copies)
        evidence: dict[str, object] = {
            "copies": n, "direction": direction, "bytes": nbytes, "mean_bytes": nbytes // n,
            "apis": dict(api_calls.most_common()),
            "blocked_host_ns": sum(r.api_time_ns for r in copies) + sum(r.sync_wait_ns for r in syncs),
            "blocking": (f"synchronous copy call ({', '.join(sync_api)})" if sync_api
                         else f"{n_sync} stream synchronizations at the same line"),
        }
        if measured:
            copy_ns = measured
            bandwidth = nbytes / (measured / 1e9)
            evidence.update(copy_gpu_ns=measured, bytes_per_s=round(bandwidth),
                            likely_pageable=bool(nbytes / n >= (1 << 20) and bandwidth < ASSUMED_PINNED_BYTES_PER_S))
            confidence = 0.7
        else:
            copy_ns = int(nbytes / ASSUMED_PAGEABLE_BYTES_PER_S * 1e9)
            bandwidth = ASSUMED_PAGEABLE_BYTES_PER_S
            evidence.update(estimated_copy_ns=copy_ns, assumed_bytes_per_s=int(ASSUMED_PAGEABLE_BYTES_PER_S))
            confidence = 0.5
        # fixed: the copy runs from pinned memory beside the rest of the step: T' = max(rest, pinned copy)
        pinned_ns = int(nbytes / max(bandwidth, ASSUMED_PINNED_BYTES_PER_S) * 1e9)
        rest_ns = max(0, basis.time_ns - copy_ns)
        removable = max(0, min(copy_ns, copy_ns + rest_ns - pinned_ns))
        evidence["pinned_copy_ns"] = pinned_ns
        model = ("copy overlap: T' = max(T - copy time, copy time from pinned memory at >= 25 GB/s), R = T - T'; "
                 "speedup = T/(T-R)" + ("" if measured else "; copy time estimated at 10 GB/s, not measured"))
        if direction == "HtoD":
            fix = ("Copy from pinned memory without waiting: DataLoader(..., pin_memory=True) or tensor.pin_memory(), "
                   "then .to(device, non_blocking=True); prefetch the next batch on a side stream "
                   "(torch.cuda.Stream) so the copy overlaps with compute.")
        else:
            fix = ("Copy into a pinned host buffer with non_blocking=True and wait on an event (torch.cuda.Event) "
                   "only where the host needs the data, or keep the data on the GPU.")
        return Finding(
            rule=self.id, title=f"{n} {direction} copies the host waits for",
            site=site, evidence=evidence,
            suggestion=f"{site_text(site)} copies {nbytes} bytes {direction} in {n} blocking copies. {fix}",
            estimated_speedup=basis.speedup(removable), confidence=confidence, model=model,
            removable_ns=int(removable))
