"""Rule: a kernel waits on global memory loads (long-scoreboard stalls) that a prefetch or an asynchronous
copy would hide: its warps wait on loads while few warps are resident per multiprocessor to hide the latency.

A kernel with many resident warps that still waits on loads is bound by the memory's bandwidth, not its
latency (a streaming kernel at full occupancy waits on the long scoreboard at 96% of its samples on the H200
and moves ~3 TB/s): more loads in flight cannot make it faster, so it is not reported. Resident warps per
multiprocessor = min(what the occupancy limits allow, blocks per multiprocessor x warps per block)."""

from __future__ import annotations

from deepctx.profiles.analyzer.index import GpuRecord
from deepctx.profiles.analyzer.occupancy import DEFAULT_CC, LIMITS, occupancy
from deepctx.profiles.analyzer.registry import Context, register
from deepctx.profiles.analyzer.rules.pc_common import PcStallRule

FEW_WARPS = 0.25  # of the multiprocessor's warps: at most this many resident leaves load latency exposed


def resident_warps(ctx: Context, r: GpuRecord) -> tuple[int, int] | None:
    """(resident warps per multiprocessor, the multiprocessor's maximum) of a launch, None without its shape."""
    if not r.blocks or not r.threads:
        return None
    cc = (ctx.index.doc.get("device") or {}).get("compute_capability") or DEFAULT_CC
    lim = LIMITS.get(cc)
    threads = r.threads // r.blocks
    occ = occupancy(threads, (r.shared_mem or 0) + (r.pcs.static_shared if r.pcs else 0), cc,
                    r.pcs.registers if r.pcs else None)
    if lim is None or occ is None:
        return None
    per_block = -(-threads // 32)
    blocks_per_sm = -(-r.blocks // max(1, ctx.device.sm_count))
    return min(occ.warps, blocks_per_sm * per_block), lim.max_warps


@register
class LongScoreboard(PcStallRule):
    id = "long-scoreboard"
    number = 11
    title = "kernels waiting on global memory loads"
    title_verb = "wait on global loads (long scoreboard)"
    reasons = ("long_scoreboard",)
    min_share = 0.3
    hide = 0.5
    model_note = "half the latency hidden behind other work, assumed"

    def launch_evidence(self, ctx: Context, recs: list[GpuRecord]) -> dict[str, object] | None:
        r = max(recs, key=lambda x: x.gpu_time_ns)
        warps = resident_warps(ctx, r)
        if warps is None:
            return {"resident_warps_per_sm": None}
        if warps[0] > FEW_WARPS * warps[1]:
            return None  # enough warps to hide the latency: bandwidth-bound
        return {"resident_warps_per_sm": warps[0], "max_warps_per_sm": warps[1], "sm_count": ctx.device.sm_count}

    fix = ("its warps wait for global loads at {line} ({instruction} consumes one). Load earlier and use the "
           "value later: prefetch the next tile into registers or shared memory (cp.async / TMA, "
           "cuda::memcpy_async, Triton num_stages > 1), unroll so several loads are in flight, or raise "
           "occupancy so other warps run meanwhile.")
