"""The PC samples under a kernel node (docs/formats.md, "Inside a kernel"): its SASS instructions with their
source line and stall reasons, for the rules that read them (rules/pc_*.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

NOT_ISSUED = "_not_issued"
_INSTRUCTION = re.compile(r"^0x([0-9a-fA-F]+)(?:\s+(.*))?$")


@dataclass(frozen=True)
class PcInstruction:
    function: str
    file: str | None
    line: int | None
    offset: int
    text: str  # the SASS ("" without nvdisasm)
    samples: int  # every sample once: the sum of its stall reasons, the not-issued subsets left out
    stalls: dict[str, int]  # reason (stall_ dropped) -> samples; no *_not_issued keys
    not_issued: dict[str, int] = field(default_factory=dict)  # reason -> samples of it when the scheduler issued nothing

    @property
    def opcode(self) -> str:
        """The operation without predicate and operands: 'LDG.E' for '@P0 LDG.E R2, ...'."""
        parts = [p for p in self.text.split() if not p.startswith("@")]
        return parts[0] if parts else ""

    def where(self) -> str:
        base = (self.file or "").rsplit("/", 1)[-1]
        return f"{base}:{self.line}" if self.line is not None else "[no line info]"

    def label(self) -> str:
        return f"{self.offset:#06x} {self.text}".strip()


@dataclass(frozen=True)
class KernelPcs:
    instructions: tuple[PcInstruction, ...]
    registers: int | None = None  # per thread, from the cubin (the gpu_function node)
    static_shared: int = 0  # bytes per block, from the cubin
    # (function, branch): the lane-varying branches of the sampled functions (a gpu_function node's `branches`)
    branches: tuple[tuple[str, dict[str, Any]], ...] = ()

    @property
    def samples(self) -> int:
        return sum(i.samples for i in self.instructions)


def kernel_pcs(node: dict[str, Any]) -> KernelPcs | None:
    """The instructions of a kernel node's gpu_function -> gpu_line -> gpu_instruction children; None when
    it has none (no PC sampling)."""
    out = []
    branches: list[tuple[str, dict[str, Any]]] = []
    registers, static_shared = None, 0
    for fn in node.get("children") or []:
        if fn["kind"] != "gpu_function":
            continue
        registers = fn.get("registers", registers)
        static_shared = max(static_shared, fn.get("static_shared") or 0)
        branches += [(fn["name"], b) for b in fn.get("branches") or []]
        for ln in fn["children"]:
            for ins in ln["children"]:
                m = _INSTRUCTION.match(ins["name"])
                metrics = ins.get("metrics") or {}
                if not m or not metrics.get("pc_samples"):
                    continue
                reasons = {k[len("stall_"):]: int(v) for k, v in metrics.items() if k.startswith("stall_") and v}
                stalls = {k: v for k, v in reasons.items() if not k.endswith(NOT_ISSUED)}
                not_issued = {k[:-len(NOT_ISSUED)]: v for k, v in reasons.items() if k.endswith(NOT_ISSUED)}
                # a sample has one stall reason; X_not_issued counts the samples of X taken when the warp's
                # scheduler issued nothing, a subset of X's (CUPTI's latencySamples): the sample count is the sum
                # of the reasons without them (captures before #32.5 also added them into pc_samples)
                samples = sum(stalls.values()) or int(metrics["pc_samples"])
                out.append(PcInstruction(fn["name"], ln.get("file"), ln.get("line"), int(m.group(1), 16),
                                         " ".join((m.group(2) or "").split()), samples, stalls, not_issued))
    return KernelPcs(tuple(out), registers, static_shared, tuple(branches)) if out else None
