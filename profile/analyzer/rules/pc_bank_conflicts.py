"""Rule: shared-memory bank conflicts: shared loads and stores throttled on the MIO queue or waiting on
the short scoreboard."""

from __future__ import annotations

from deepctx.profile.analyzer.registry import register
from deepctx.profile.analyzer.rules.pc_common import PcStallRule


@register
class BankConflicts(PcStallRule):
    id = "bank-conflicts"
    number = 13
    title = "shared-memory bank conflicts"
    title_verb = "stall on shared memory (MIO throttle, short scoreboard)"
    reasons = ("mio_throttle", "short_scoreboard")
    opcodes = ("LDS", "STS", "LDSM", "ATOMS")
    min_share = 0.15
    hide = 0.5
    model_note = "half of these stalls are the conflicts' replays, assumed"
    fix = ("{instruction} at {line} waits on shared memory: threads of a warp likely hit the same bank. Pad "
           "the shared array (a [32][33] tile for a 32x32 transpose) or swizzle the index, so a warp's 32 "
           "accesses fall in 32 banks.")
