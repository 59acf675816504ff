"""Rule: warp divergence: warps waiting for their branch to resolve, or at the reconvergence points."""

from __future__ import annotations

from deepctx.profiles.analyzer.pcs import PcInstruction
from deepctx.profiles.analyzer.registry import register
from deepctx.profiles.analyzer.rules.pc_common import PcStallRule

RECONVERGE = ("BSSY", "BSYNC", "WARPSYNC", "BMOV")


@register
class Divergence(PcStallRule):
    id = "warp-divergence"
    number = 14
    title = "warp divergence"
    title_verb = "resolve branches or wait to reconverge"
    reasons = ("branch_resolving", "barrier", "wait")
    min_share = 0.15
    hide = 0.5
    model_note = "the two paths of a divergent branch run one after the other; half of that time goes, assumed"

    def counts(self, ins: PcInstruction) -> int:
        """branch_resolving anywhere; the others only at the reconvergence instructions."""
        n = ins.stalls.get("branch_resolving", 0)
        if ins.opcode.startswith(RECONVERGE):
            n += sum(v for k, v in ins.stalls.items() if k != "branch_resolving")
        return n

    fix = ("warps of {kernel} split at a branch near {line} ({instruction}) and run its paths one after the "
           "other. Make the condition uniform across a warp (sort or bucket the work so a warp takes one "
           "path, branch on warp-level values), or compute both sides and select.")
