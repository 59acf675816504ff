"""Rule: low occupancy from registers, shared memory or block size while the kernel's warps wait on latency
that more resident warps would hide. Registers and static shared memory come from the sampled cubin (the
gpu_function node); without them the occupancy is what the launch allows, an upper bound."""

from __future__ import annotations

from collections import defaultdict

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.names import short_kernel_name
from deepctx.profiles.analyzer.occupancy import DEFAULT_CC, occupancy
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import launches, site_text
from deepctx.profiles.analyzer.rules.pc_common import MIN_SAMPLES, NO_SAMPLES, pc_evidence

LOW = 0.25  # of the multiprocessor's warps
LATENCY = ("long_scoreboard", "short_scoreboard", "lg_throttle", "mio_throttle", "barrier", "membar")
MIN_LATENCY_SHARE = 0.3
HIDE = 0.5


@register
class LowOccupancy(Rule):
    id = "low-occupancy"
    number = 16
    title = "low occupancy from registers, shared memory or block size"
    needs = "device"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        sampled = [r for r in launches(ctx.index) if r.pcs is not None]
        if not sampled:
            return NotEvaluated(NO_SAMPLES)
        cc = (ctx.index.doc.get("device") or {}).get("compute_capability")
        groups: dict[tuple[Site | None, str], list[GpuRecord]] = defaultdict(list)
        for r in sampled:
            groups[(r.ctx.site, r.name)].append(r)
        out = []
        for (site, name), recs in groups.items():
            r = max(recs, key=lambda x: x.gpu_time_ns)
            threads = (r.threads or 0) // max(1, r.blocks or 1)
            pcs = r.pcs
            registers = pcs.registers if pcs is not None else None
            shared = (r.shared_mem or 0) + (pcs.static_shared if pcs is not None else 0)
            occ = occupancy(threads, shared, cc, registers)
            if occ is None or occ.share > LOW or occ.limit == "warps":
                continue
            instructions = [i for x in recs if x.pcs is not None for i in x.pcs.instructions]
            total = sum(i.samples for i in instructions)
            waiting = sum(i.stalls.get(s, 0) for i in instructions for s in LATENCY)
            if not total or waiting < MIN_SAMPLES or waiting / total < MIN_LATENCY_SHARE:
                continue
            kernel = short_kernel_name(name, 60)
            gpu_ns = sum(x.gpu_time_ns for x in recs)
            evidence: dict[str, object] = {
                "kernel": kernel, "threads_per_block": threads, "shared_mem_per_block": shared,
                "dynamic_shared_mem": r.shared_mem or 0,
                "occupancy_upper_bound": occ.share, "resident_warps": occ.warps, "resident_blocks": occ.blocks,
                "limited_by": occ.limit, "compute_capability": cc or f"{DEFAULT_CC} (assumed)",
                "registers_per_thread": registers, "latency_stall_share": round(waiting / total, 3),
                **pc_evidence(recs)}
            if gpu_ns:
                removable = gpu_ns * waiting / total * HIDE
                evidence.update(gpu_time_ns=gpu_ns, removable_ns=int(removable))
                speedup, confidence = ctx.basis.speedup(removable), 0.5
                model = (f"PC samples: R = kernel GPU time x latency stall samples / kernel samples x h, h = {HIDE:g} "
                         "(more resident warps hide about half of that latency, assumed); speedup = T/(T-R); "
                         "occupancy from the block size, shared memory and registers per thread"
                         + ("" if registers else " (registers unknown: an upper bound)"))
            else:
                removable, speedup, confidence = 0, None, 0.3
                model = "not estimated: the kernel's GPU time was not measured"
            limit = {"shared memory": "its blocks' shared memory", "registers": f"its {registers} registers per thread"
                     }.get(occ.limit, "the multiprocessor's block limit (blocks too small)")
            out.append(Finding(
                rule=self.id, title=f"{kernel}: at most {occ.share:.0%} occupancy, limited by {occ.limit}",
                site=site, evidence=evidence,
                suggestion=(f"{site_text(site)} launches {kernel} with {threads} threads and {r.shared_mem or 0} "
                            f"bytes of shared memory per block: {limit} leaves room for {occ.blocks} "
                            f"blocks ({occ.warps} warps) per multiprocessor, while {waiting / total:.0%} of its "
                            "samples wait on memory. Use less shared memory per block (smaller tiles, or reuse a "
                            "buffer), fewer registers (__launch_bounds__, -maxrregcount, less unrolling), or more "
                            "threads per block, so more warps are resident to hide the latency."),
                estimated_speedup=speedup, confidence=confidence, model=model, removable_ns=int(removable)))
        return out
