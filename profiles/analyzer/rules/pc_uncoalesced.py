"""Rule: uncoalesced or strided global accesses: memory instructions throttled by the global/local queue
(each warp's access splits into many transactions)."""

from __future__ import annotations

from deepctx.profiles.analyzer.registry import register
from deepctx.profiles.analyzer.rules.pc_common import PcStallRule


@register
class Uncoalesced(PcStallRule):
    id = "uncoalesced-access"
    number = 12
    title = "uncoalesced or strided global memory access"
    title_verb = "throttle on the global memory queue"
    reasons = ("lg_throttle",)
    opcodes = ("LDG", "STG", "LD.", "ST.", "ATOMG", "RED")
    min_share = 0.15
    hide = 1.0
    model_note = "a coalesced access issues one transaction per 128 bytes instead of one per thread: the queue's stalls go; an upper bound"
    fix = ("{instruction} at {line} fills the memory queue: neighbouring threads touch addresses far apart "
           "(strided or indirect indexing), so each warp access becomes many transactions. Make thread i access "
           "element i (swap the loop order or the array layout, structure of arrays), or stage the tile "
           "through shared memory and read it transposed.")
