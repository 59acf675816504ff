"""Rule: low occupancy from registers or shared memory. Needs each kernel's registers per thread and
static shared memory, which the profile does not carry yet (the cubin's .nv.info has them): said, not
guessed."""

from __future__ import annotations

from deepctx.profile.analyzer.finding import Finding
from deepctx.profile.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profile.analyzer.rules.pc_common import NO_SAMPLES


@register
class LowOccupancy(Rule):
    id = "low-occupancy"
    number = 16
    title = "low occupancy from registers or shared memory"
    needs = "device"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        if not any(r.pcs is not None for r in ctx.index.gpu):
            return NotEvaluated(NO_SAMPLES)
        return NotEvaluated("needs each kernel's registers per thread and shared memory per block, which the "
                            "profile does not carry yet (the sampled cubins have them: .nv.info)")
