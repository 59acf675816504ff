"""Rule: a compiled function compiled again during the capture (issue 33.4): a guard of the compiled code failed
(a new input shape, a changed object), and the process paid a compile in its steps."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.names import is_library_frame
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import site_text
from deepctx.profiles.analyzer.rules.compiles import NO_COMPILES, call_site, compiles_in, in_capture


def advice(reason: str) -> str:
    """What to change, from the guard that failed."""
    if "size mismatch" in reason or "stride mismatch" in reason:
        return ("an input's shape changes between calls: mark the changing dimension dynamic "
                "(torch._dynamo.mark_dynamic(tensor, dim)) or compile with dynamic=True, or pad inputs to a few "
                "fixed shapes")
    if "___check_obj_id" in reason or "id(" in reason:
        return ("an object the compiled code depends on is a new one at each call (a module, function or closure "
                "made per step): make it once and reuse it")
    if "dtype mismatch" in reason or "device mismatch" in reason or "requires_grad mismatch" in reason:
        return "an input's dtype, device or requires_grad changes between calls: keep them the same"
    return "make what the failed guard checks stay the same between calls"


@register
class Recompiles(Rule):
    id = "recompiles"
    number = 18
    title = "torch.compile compiling a function again during the run"
    needs = "api"
    baseline = "wall"  # a compile blocks the step that triggers it

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        doc = ctx.index.doc
        compiles = compiles_in(doc)
        if not compiles:
            return NO_COMPILES
        groups: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
        for c in compiles:
            if c["recompile_reason"] and in_capture(doc, c):
                groups[(c["file"], c["line"], c["function"])].append(c)
        out = []
        for (file, line, function), recs in groups.items():
            seconds = sum(c["time_s"] for c in recs)
            reasons = list(dict.fromkeys(c["recompile_reason"] for c in recs))
            site = call_site(recs[0])
            removable = seconds * 1e9
            # a compiled module is traced from torch's own wrapper (`inner`, torch/_dynamo/external_utils.py):
            # named by the line that calls it, which the user wrote
            shown = (f"the code called by {site_text(site)}" if is_library_frame(file, None) else function)
            out.append(Finding(
                rule=self.id, title=f"{shown} compiled {len(recs)} more time(s) during the capture",
                site=site,
                evidence={"recompiles": len(recs), "compile_time_s": round(seconds, 3), "reasons": reasons[:3],
                          "compiled_function": f"{function} ({file}:{line})",
                          "compile_ids": [c["id"] for c in recs]},
                suggestion=(f"torch.compile compiled {shown} again {len(recs)} time(s) in the capture "
                            f"({seconds:.2f} s) because a guard failed: {reasons[0]}. At {site_text(site)}, "
                            f"{advice(reasons[0])}. After torch._dynamo.config.recompile_limit (8) recompiles "
                            "the function runs uncompiled."),
                estimated_speedup=ctx.basis.speedup(removable), confidence=0.7,
                model=("recompiles: R = the compile time of the recompiles that began during the capture (from "
                       "the trace's compilation metrics); speedup = T/(T-R) over the capture's wall time; "
                       "assumes they would not recur after the fix"),
                removable_ns=int(removable)))
        return out
