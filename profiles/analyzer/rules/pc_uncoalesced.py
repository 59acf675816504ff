"""Rule: uncoalesced or strided global accesses, as sm_90's stall reasons show them (docs/analyzer.md, rule 12).

A warp's access to addresses far apart splits into up to 32 transactions: the global/local memory queue fills
(`lg_throttle` at the LDG/STG), the loads' results come late (`long_scoreboard` at their consumers, on the
throttled line), and at exit the warps wait for their split stores to drain (`drain`). A coalesced
bandwidth-bound kernel waits on the long scoreboard too, but its queue does not throttle and little drains;
so the rule needs the queue's own stalls (lg_throttle at memory instructions, and with drain) before it
counts the long-scoreboard waits of the throttled lines."""

from __future__ import annotations

from collections import defaultdict

from deepctx.profiles.analyzer.index import GpuRecord
from deepctx.profiles.analyzer.pcs import PcInstruction
from deepctx.profiles.analyzer.registry import Context, register
from deepctx.profiles.analyzer.rules.pc_common import PcStallRule

MEMORY = ("LDG", "STG", "LD.", "ST.", "ATOMG", "RED")
MIN_THROTTLE = 0.05  # lg_throttle at global/local memory instructions, share of the kernel's samples
MIN_QUEUE = 0.2  # lg_throttle there plus drain
LINE_THROTTLE = 0.01  # a line's memory instructions throttled at this share of the samples: its waits count


def _queue(instructions: list[PcInstruction]) -> tuple[int, int, int]:
    """(samples, lg_throttle at memory instructions, drain)."""
    total = sum(i.samples for i in instructions)
    lg = sum(i.stalls.get("lg_throttle", 0) for i in instructions if i.opcode.startswith(MEMORY))
    return total, lg, sum(i.stalls.get("drain", 0) for i in instructions)


@register
class Uncoalesced(PcStallRule):
    id = "uncoalesced-access"
    number = 12
    title = "uncoalesced or strided global memory access"
    title_verb = "wait on split global memory accesses (queue, loads' results, stores draining)"
    reasons = ("lg_throttle", "long_scoreboard", "drain")
    opcodes = MEMORY
    min_share = 0.15
    hide = 1.0
    model_note = ("a coalesced access issues one transaction per 128 bytes instead of one per thread: the queue's "
                  "throttling, the stores' drain and the waits it lengthens go; an upper bound")
    fix = ("{instruction} at {line} fills the memory queue: neighbouring threads touch addresses far apart "
           "(strided or indirect indexing), so each warp access becomes many transactions. Make thread i access "
           "element i (swap the loop order or the array layout, structure of arrays), or stage the tile "
           "through shared memory and read it transposed.")

    def hits(self, instructions: list[PcInstruction]) -> list[tuple[PcInstruction, int]]:
        total = sum(i.samples for i in instructions) or 1
        by_line: dict[str, int] = defaultdict(int)
        for i in instructions:
            if i.opcode.startswith(MEMORY):
                by_line[i.where()] += i.stalls.get("lg_throttle", 0)
        throttled = {line for line, n in by_line.items() if n / total >= LINE_THROTTLE}
        out = []
        for i in instructions:
            n = i.stalls.get("drain", 0)
            if i.opcode.startswith(MEMORY):
                n += i.stalls.get("lg_throttle", 0)
            if i.where() in throttled:
                n += i.stalls.get("long_scoreboard", 0)
            out.append((i, n))
        return out

    def place(self, ins: PcInstruction, n: int) -> int:
        return n - ins.stalls.get("drain", 0)  # the exit's drain is the stores' cost, not where they are

    def launch_evidence(self, ctx: Context, recs: list[GpuRecord]) -> dict[str, object] | None:
        total, lg, drain = _queue([i for r in recs if r.pcs is not None for i in r.pcs.instructions])
        if not total or lg / total < MIN_THROTTLE or (lg + drain) / total < MIN_QUEUE:
            return None
        return {"lg_throttle_share": round(lg / total, 3), "drain_share": round(drain / total, 3)}
