"""Rule: one line launches the same few elementwise kernels over and over: a fusion candidate."""

from __future__ import annotations

from collections import Counter, defaultdict

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.names import is_elementwise_kernel, operator_from_kernel, short_kernel_name
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule, register
from deepctx.profiles.analyzer.rules.common import launches, site_text

INCIDENTAL = 8  # an op run 8 times less often than the chain's most frequent one is not part of the chain


def op_name(r: GpuRecord) -> str:
    return r.ctx.op or operator_from_kernel(r.name) or short_kernel_name(r.name, 40)


@register
class ElementwiseChain(Rule):
    id = "elementwise-chain"
    number = 6
    title = "repeated sequences of small elementwise kernels"
    needs = "api"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        idx, basis, lim = ctx.index, ctx.basis, ctx.limits
        all_launches = launches(idx)
        total = sum(r.calls for r in all_launches)
        groups: dict[Site | None, list[GpuRecord]] = defaultdict(list)
        for r in all_launches:
            if is_elementwise_kernel(r.name):
                groups[r.ctx.issuer or r.ctx.site].append(r)
        out = []
        for issuer, recs in groups.items():
            ops: Counter[str] = Counter()
            for r in recs:
                ops[op_name(r)] += r.calls
            # a chain runs each of its ops about equally often; an op the issuer ran far less often is another
            # call of it (one ReLU after the last block of 49), not a link of the chain
            top = max(ops.values())
            ops = Counter({op: c for op, c in ops.items() if c * INCIDENTAL >= top})
            runs = min(ops.values())
            per_run = {op: round(c / runs) for op, c in ops.most_common()}
            kernels_per_run = sum(per_run.values())
            n = sum(ops.values())
            if kernels_per_run < 2 or runs < lim.loop_calls:
                continue
            gpu_ns = sum(r.gpu_time_ns for r in recs)
            site = Counter(r.ctx.site for r in recs).most_common(1)[0][0]
            sequence = ", ".join(f"{op} x{k}" for op, k in per_run.items())
            evidence: dict[str, object] = {
                "sequence": [{"op": op, "per_run": k} for op, k in per_run.items()], "runs": runs,
                "kernels_per_run": kernels_per_run, "launches": n, "share_of_launches": round(n / total, 4),
            }
            if issuer is not None and issuer != site:
                evidence["issued_at"] = issuer.label()
            if gpu_ns:
                removable = gpu_ns * (1 - 1 / kernels_per_run)
                evidence["gpu_time_ns"] = gpu_ns
                speedup = basis.speedup(removable)
                confidence = 0.6
                model = ("fusion: R = GPU time of the sequence x (1 - 1/kernels per run), one fused pass over "
                         "memory instead of one per kernel; speedup = T/(T-R)")
            else:
                if n / total < lim.min_share:
                    continue
                removable, speedup, confidence = 0, None, 0.3
                model = ("not estimated: GPU time not measured (fusion saves about (k-1)/k of the device time of "
                         "k memory-bound kernels)")
            out.append(Finding(
                rule=self.id, title=f"{kernels_per_run} elementwise kernels per run of one line, {runs} runs",
                site=site, evidence=evidence,
                suggestion=(f"{site_text(site)} runs {sequence} as separate kernels each time "
                            f"({kernels_per_run} passes over memory). Fuse them: torch.compile the function "
                            "(Inductor emits one kernel), use a fused operator where one exists (e.g. "
                            "torch.nn.functional.gelu(x, approximate='tanh') for the tanh GELU formula), or "
                            "write one Triton kernel."),
                estimated_speedup=speedup, confidence=confidence, model=model, removable_ns=int(removable)))
        return out
