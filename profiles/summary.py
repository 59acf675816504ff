"""What a profile document adds up to: per-process totals, busiest kernels, busiest Python lines.

A line's cost is every cost whose innermost Python frame is that line: the line that caused the work
(a kernel launched under `loss.backward()` is charged to that line, not to the lines that called it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from deepctx.profiles.lost import lost_counters
from deepctx.profiles.metrics import KERNEL_METRICS, METRICS

LineKey = tuple[str, int, str]  # (file, line, function)


@dataclass
class Cost:
    """One node with a nonzero self value, with its innermost Python line and a way to its call path."""

    node: dict[str, Any]
    line: LineKey | None
    _at: int
    _parents: list[tuple[dict[str, Any], int]]

    def path(self) -> list[dict[str, Any]]:
        """The nodes from below the root down to this one."""
        out = []
        i = self._at
        while i > 0:
            node, i = self._parents[i]
            out.append(node)
        out.reverse()
        return out


@dataclass
class Summary:
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(METRICS, 0))
    launches: int = 0  # calls of kernel nodes
    copy_bytes: int = 0  # bytes of memcpy nodes (allocations also carry bytes: not copies)
    kernels: dict[str, dict[str, int]] = field(default_factory=dict)
    lines: dict[LineKey, dict[str, int]] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)  # the profile's lost / dropped counters


def iter_costs(doc: dict[str, Any]) -> Iterator[Cost]:
    """Every node with a nonzero self value, preorder, iteratively (trees can be thousands deep)."""
    root = doc.get("root")
    if not isinstance(root, dict):
        return
    parents: list[tuple[dict[str, Any], int]] = [(root, -1)]  # (node, index of its parent)
    stack: list[tuple[int, LineKey | None]] = [(0, None)]
    while stack:
        at, line = stack.pop()
        node = parents[at][0]
        if node.get("kind") == "python" and node.get("file") is not None:
            line = (str(node["file"]), int(node.get("line") or 0), str(node.get("name") or ""))
        metrics = node.get("metrics") or {}
        if any(metrics.values()):
            yield Cost(node, line, at, parents)
        for child in reversed(node.get("children") or []):
            parents.append((child, at))
            stack.append((len(parents) - 1, line))


def summarize(doc: dict[str, Any]) -> Summary:
    s = Summary()
    for cost in iter_costs(doc):
        m = cost.node["metrics"]
        for k in METRICS:
            s.totals[k] += int(m.get(k, 0))
        kind = cost.node.get("kind")
        if kind == "kernel":
            s.launches += int(m.get("calls", 0))
            k = s.kernels.setdefault(str(cost.node.get("name")), dict.fromkeys(KERNEL_METRICS, 0))
            for name in KERNEL_METRICS:
                k[name] += int(m.get(name, 0))
        elif kind == "memcpy":
            s.copy_bytes += int(m.get("bytes", 0))
        if cost.line is not None:
            acc = s.lines.setdefault(cost.line, dict.fromkeys(METRICS, 0))
            for k in METRICS:
                acc[k] += int(m.get(k, 0))
    s.lost.update(lost_counters(doc.get("stats") or {}, zeros=True))
    return s
