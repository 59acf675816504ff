"""Rule: a kernel waits on global memory loads (long-scoreboard stalls) that a prefetch or an asynchronous
copy would hide."""

from __future__ import annotations

from deepctx.profile.analyzer.registry import register
from deepctx.profile.analyzer.rules.pc_common import PcStallRule


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
    fix = ("its warps wait for global loads at {line} ({instruction} consumes one). Load earlier and use the "
           "value later: prefetch the next tile into registers or shared memory (cp.async / TMA, "
           "cuda::memcpy_async, Triton num_stages > 1), unroll so several loads are in flight, or raise "
           "occupancy so other warps run meanwhile.")
