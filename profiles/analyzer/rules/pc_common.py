"""What the PC-sampling rules share (rules/pc_*.py): a kernel's stall samples of some reasons at some
instructions, the hottest instruction and source line among them, and the GPA-style estimate.

Samples: each sample has one stall reason; CUPTI's <reason>_not_issued reasons are subsets of <reason> and are
not counted again (pcs.py).

Model (every pc_* rule): a kernel that ran G ns of GPU time and took S PC samples, S_r of them stalled for
the rule's reasons at the rule's instructions, spends about G x S_r / S on those stalls (samples are taken
at a fixed period of cycles, so they split the kernel's time). The fix removes a fraction h of that
(h stated per rule, an assumption): R = G x S_r / S x h, speedup = T / (T - R) (docs/analyzer.md)."""

from __future__ import annotations

from collections import defaultdict
from typing import ClassVar

from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import GpuRecord, Site
from deepctx.profiles.analyzer.names import short_kernel_name
from deepctx.profiles.analyzer.pcs import PcInstruction
from deepctx.profiles.analyzer.registry import Context, NotEvaluated, Rule
from deepctx.profiles.analyzer.rules.common import launches, site_text

MIN_SAMPLES = 20  # fewer stall samples than this in a kernel say nothing
NO_SAMPLES = ("the profile has no PC samples (capture with `deepctx run --pc-sampling`: the kernels' stall "
              "reasons per instruction)")


def pc_evidence(recs: list[GpuRecord]) -> dict[str, object]:
    """What PC samples add to another rule's finding on these kernel records (empty without them): the
    samples, the hottest source line and the top stall reasons."""
    instructions = [i for r in recs if r.pcs is not None for i in r.pcs.instructions]
    if not instructions:
        return {}
    stalls: dict[str, int] = defaultdict(int)
    lines: dict[str, int] = defaultdict(int)
    for i in instructions:
        lines[i.where()] += i.samples
        for k, v in i.stalls.items():
            stalls[k] += v
    top = sorted(stalls.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return {"pc_samples": sum(i.samples for i in instructions),
            "kernel_line": max(lines.items(), key=lambda kv: (kv[1], kv[0]))[0], "top_stalls": dict(top)}


class PcStallRule(Rule):
    needs = "device"
    reasons: ClassVar[tuple[str, ...]]  # stall reasons counted (metric names without stall_)
    opcodes: ClassVar[tuple[str, ...]] = ()  # SASS opcode prefixes they count at (empty: any instruction)
    min_share: ClassVar[float] = 0.2  # of the kernel's samples
    hide: ClassVar[float]  # h: the share of those stalls the fix removes (assumed)
    fix: ClassVar[str]  # what to change, in the kernel's terms (a format string: {kernel}, {line}, {instruction})
    model_note: ClassVar[str]  # why h is what it is

    def counts(self, ins: PcInstruction) -> int:
        if self.opcodes and not ins.opcode.startswith(self.opcodes):
            return 0
        return sum(ins.stalls.get(r, 0) for r in self.reasons)

    def hits(self, instructions: list[PcInstruction]) -> list[tuple[PcInstruction, int]]:
        """Each instruction with its samples the rule counts (a rule may look at the instructions together)."""
        return [(i, self.counts(i)) for i in instructions]

    def place(self, ins: PcInstruction, n: int) -> int:
        """Of an instruction's n counted samples, those that point at where to act (default: all); the kernel
        line and the instruction are the ones with the most."""
        return n

    def launch_evidence(self, ctx: Context, recs: list[GpuRecord]) -> dict[str, object] | None:
        """More evidence from the launches, or None when they show the rule does not apply (default: {})."""
        return {}

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        sampled = [r for r in launches(ctx.index) if r.pcs is not None]
        if not sampled:
            return NotEvaluated(NO_SAMPLES)
        groups: dict[tuple[Site | None, str], list[GpuRecord]] = defaultdict(list)
        for r in sampled:
            groups[(r.ctx.site, r.name)].append(r)
        return [f for (site, name), recs in groups.items() if (f := self._finding(ctx, site, name, recs))]

    def _finding(self, ctx: Context, site: Site | None, name: str, recs: list[GpuRecord]) -> Finding | None:
        instructions = [i for r in recs if r.pcs is not None for i in r.pcs.instructions]
        total = sum(i.samples for i in instructions)
        hits = [(i, n) for i, n in self.hits(instructions) if n]
        matched = sum(n for _, n in hits)
        if not total or matched < MIN_SAMPLES or matched / total < self.min_share:
            return None
        more = self.launch_evidence(ctx, recs)
        if more is None:
            return None
        by_line: dict[str, int] = defaultdict(int)
        for i, n in hits:
            by_line[i.where()] += self.place(i, n)
        line, line_n = max(by_line.items(), key=lambda kv: (kv[1], kv[0]))
        top, top_n = max(((i, self.place(i, n)) for i, n in hits if i.where() == line),
                         key=lambda h: (h[1], -h[0].offset))
        share = matched / total
        gpu_ns = sum(r.gpu_time_ns for r in recs)
        kernel = short_kernel_name(name, 60)
        evidence: dict[str, object] = {
            "kernel": kernel, "pc_samples": total, "stall_samples": matched, "stall_share": round(share, 3),
            "stall_reasons": list(self.reasons), "kernel_line": line, "line_stall_samples": line_n,
            "instruction": top.label(), "instruction_stall_samples": top_n,
            "instruction_stalls": dict(sorted(top.stalls.items(), key=lambda kv: -kv[1])[:3]),
            **more,
        }
        if gpu_ns:
            removable = gpu_ns * share * self.hide
            evidence.update(gpu_time_ns=gpu_ns, removable_ns=int(removable))
            speedup = ctx.basis.speedup(removable)
            confidence = 0.5
            model = (f"PC samples: R = kernel GPU time x stall samples / kernel samples x h, h = {self.hide:g} "
                     f"({self.model_note}); speedup = T/(T-R)")
        else:
            removable, speedup, confidence = 0, None, 0.3
            model = "not estimated: the kernel's GPU time was not measured"
        where = {"kernel": kernel, "line": line, "instruction": top.label()}
        return Finding(
            rule=self.id, title=f"{kernel}: {share:.0%} of its samples {self.title_verb} at {line}",
            site=site, evidence=evidence,
            suggestion=f"{site_text(site)} launches {kernel}; " + self.fix.format(**where),
            estimated_speedup=speedup, confidence=confidence, model=model, removable_ns=int(removable))

    title_verb: ClassVar[str] = "stall"
