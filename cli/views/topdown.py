"""Top-down: the calling context tree as recorded, children sorted by a metric."""

from __future__ import annotations

from dataclasses import dataclass

from deepctx.profiles.tree import ViewNode


@dataclass(frozen=True)
class Row:
    """One visible line of a tree view: depth, node, and whether it is the last of its siblings."""

    depth: int
    node: ViewNode
    last: bool
    guides: tuple[bool, ...]  # for each ancestor level: does a later sibling follow there (draw a bar)


def sort_key(metric: str, by: str) -> object:
    if by == "self":
        return lambda n: (-n.self.get(metric, 0), -n.total.get(metric, 0), n.frame.name)
    return lambda n: (-n.total.get(metric, 0), n.frame.name)


def rows(root: ViewNode, metric: str, by: str = "total", min_percent: float = 0.0,
         max_depth: int = 1 << 30) -> tuple[list[Row], int]:
    """Visible rows in display order and the number of nodes hidden by min_percent or max_depth.

    A node is shown when its total for metric is at least min_percent of the root's total (nodes with
    zero everywhere are hidden when min_percent > 0), and its depth (root's children: 0) is below max_depth.
    """
    grand = root.total.get(metric, 0)
    floor = grand * min_percent / 100.0
    key = sort_key(metric, by)
    out: list[Row] = []
    hidden = 0
    start = sorted(root.children, key=key)  # type: ignore[arg-type]
    stack: list[tuple[ViewNode, int, bool, tuple[bool, ...]]] = []
    for i, n in reversed(list(enumerate(start))):
        stack.append((n, 0, i == len(start) - 1, ()))
    while stack:
        node, depth, last, guides = stack.pop()
        value = node.total.get(metric, 0)
        if depth >= max_depth or (min_percent > 0 and (value < floor or value == 0)):
            hidden += _count(node)
            continue
        out.append(Row(depth, node, last, guides))
        kids = sorted(node.children, key=key)  # type: ignore[arg-type]
        for i in range(len(kids) - 1, -1, -1):
            stack.append((kids[i], depth + 1, i == len(kids) - 1, guides + (not last,)))
    return out, hidden


def _count(node: ViewNode) -> int:
    return sum(1 for _ in node.walk())
