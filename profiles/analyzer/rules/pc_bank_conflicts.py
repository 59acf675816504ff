"""Rule: shared-memory bank conflicts. An n-way conflict replays a shared access n times in the MIO pipe, so
shared-memory instructions wait to enter the MIO queue (mio_throttle) and the instructions that use a shared
load's value wait longer for it (short scoreboard). On sm_90 the value's wait lands on its consumer, not on
the LDS: in the planted [32][32] transpose the column read's STG waits on the short scoreboard for 12% of the
kernel's samples, 4% with the padded tile. Counted: mio_throttle at LDS/STS/LDSM/ATOMS, and short_scoreboard at
any instruction on a source line that loads from shared memory."""

from __future__ import annotations

from deepctx.profiles.analyzer.pcs import PcInstruction
from deepctx.profiles.analyzer.registry import register
from deepctx.profiles.analyzer.rules.pc_common import PcStallRule

SHARED = ("LDS", "STS", "LDSM", "ATOMS")
SHARED_LOADS = ("LDS", "LDSM")


@register
class BankConflicts(PcStallRule):
    id = "bank-conflicts"
    number = 13
    title = "shared-memory bank conflicts"
    title_verb = "stall on shared memory (MIO throttle, short scoreboard)"
    reasons = ("mio_throttle", "short_scoreboard")
    opcodes = SHARED
    min_share = 0.15
    hide = 0.5
    model_note = "half of these stalls are the conflicts' replays, assumed"

    def hits(self, instructions: list[PcInstruction]) -> list[tuple[PcInstruction, int]]:
        loads = {i.where() for i in instructions if i.opcode.startswith(SHARED_LOADS)}
        return [(i, (i.stalls.get("mio_throttle", 0) if i.opcode.startswith(SHARED) else 0)
                 + (i.stalls.get("short_scoreboard", 0) if i.where() in loads else 0)) for i in instructions]

    fix = ("shared memory stalls at {line} ({instruction}): threads of a warp likely hit the same bank. Pad "
           "the shared array (a [32][33] tile for a 32x32 transpose) or swizzle the index, so a warp's 32 "
           "accesses fall in 32 banks.")
