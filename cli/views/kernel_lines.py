"""A kernel's hot source lines and SASS instructions with their stall reasons, from the PC-sampling levels
of the profile document (kernel -> gpu_function -> gpu_line -> gpu_instruction, docs/formats.md). The
kernel nodes of one name (launched from several lines) are summed: the question is where the kernel's
own code stalls, wherever it was launched from."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

PC_SAMPLES = "pc_samples"
STALL = "stall_"


@dataclass
class Row:
    name: str  # the line (file:line) or the instruction (offset and SASS)
    samples: int = 0
    stalls: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # reason (without stall_) -> samples
    file: str | None = None
    line: int | None = None

    def add(self, metrics: dict[str, int]) -> None:
        self.samples += metrics.get(PC_SAMPLES, 0)
        for m, v in metrics.items():
            if m.startswith(STALL) and v:
                self.stalls[m[len(STALL):]] += v

    def top_stalls(self, n: int = 3) -> list[tuple[str, int]]:
        return sorted(self.stalls.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


@dataclass
class LineRows:
    line: Row
    instructions: dict[str, Row] = field(default_factory=dict)


@dataclass
class KernelLines:
    name: str
    samples: int = 0
    sites: int = 0  # kernel nodes summed (launch call paths)
    lines: dict[str, LineRows] = field(default_factory=dict)

    def hot_lines(self) -> list[LineRows]:
        return sorted(self.lines.values(), key=lambda lr: (-lr.line.samples, lr.line.name))


def kernel_lines(doc: dict[str, Any], kernel: str | None = None) -> list[KernelLines]:
    """Every PC-sampled kernel (whose name `kernel`, a regex, matches when given), most samples first."""
    rx = re.compile(kernel) if kernel else None
    out: dict[str, KernelLines] = {}
    stack = [doc["root"]] if doc.get("root") else []
    while stack:
        node = stack.pop()
        if node["kind"] != "kernel":
            stack += node["children"]
            continue
        fns = [c for c in node["children"] if c["kind"] == "gpu_function"]
        if not fns or (rx is not None and not rx.search(node["name"])):
            continue
        k = out.setdefault(node["name"], KernelLines(node["name"]))
        k.sites += 1
        for fn in fns:
            for ln in fn["children"]:
                rows = k.lines.setdefault(ln["name"], LineRows(Row(ln["name"], file=ln["file"], line=ln["line"])))
                for ins in ln["children"]:
                    row = rows.instructions.setdefault(ins["name"], Row(ins["name"]))
                    row.add(ins["metrics"])
                    rows.line.add(ins["metrics"])
                    k.samples += ins["metrics"].get(PC_SAMPLES, 0)
    return sorted(out.values(), key=lambda k: (-k.samples, k.name))
