"""Flat: one row per function (lines merged), with its self values and its inclusive values.

Inclusive values count each call path once: a node below another node of the same function (recursion)
adds nothing to that function's total. Thread and root nodes are not functions and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepctx.profiles.tree import Frame, ViewNode, gc_paused


@dataclass
class FlatRow:
    frame: Frame
    self: dict[str, int]
    total: dict[str, int]
    nodes: int  # how many call paths this function appears on


@gc_paused
def flat(root: ViewNode) -> list[FlatRow]:
    metrics = list(root.total)
    rows: dict[Frame, FlatRow] = {}
    active: dict[Frame, int] = {}
    stack: list[tuple[ViewNode, bool]] = [(c, False) for c in reversed(root.children)]
    while stack:
        node, leaving = stack.pop()
        if node.frame.kind == "thread":
            if not leaving:
                stack.extend((c, False) for c in reversed(node.children))
            continue
        key = node.frame.function()
        if leaving:
            active[key] -= 1
            continue
        row = rows.get(key)
        if row is None:
            row = rows[key] = FlatRow(key, dict.fromkeys(metrics, 0), dict.fromkeys(metrics, 0), 0)
        row.nodes += 1
        for m in metrics:
            row.self[m] += node.self[m]
        if not active.get(key):
            for m in metrics:
                row.total[m] += node.total[m]
        active[key] = active.get(key, 0) + 1
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(node.children))
    return list(rows.values())


def sorted_rows(rows: list[FlatRow], metric: str, by: str = "self") -> list[FlatRow]:
    if by == "self":
        return sorted(rows, key=lambda r: (-r.self.get(metric, 0), -r.total.get(metric, 0), r.frame.name))
    return sorted(rows, key=lambda r: (-r.total.get(metric, 0), -r.self.get(metric, 0), r.frame.name))
