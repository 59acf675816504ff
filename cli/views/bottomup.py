"""Bottom-up: who calls what. Roots are the functions where the cost was measured; below each, its callers.

Each measured node's self values are charged to the chain of its callers, functions merged (lines
dropped), so a root's total is the function's self value over all its call paths, and a caller's total is
the part of it that came through that caller. With a focus, the roots are the matching functions with
their inclusive values instead: the callers of NAME.
"""

from __future__ import annotations

from deepctx.cli.views.focus import matcher, outermost_matches
from deepctx.cli.views.merge import empty
from deepctx.profiles.tree import Frame, ViewNode, gc_paused, iter_paths


class _Inverter:
    def __init__(self, title: str, metrics: list[str]) -> None:
        self.metrics = metrics
        self.root = empty(Frame("root", title), metrics)
        self.index: dict[int, dict[Frame, ViewNode]] = {}

    def charge(self, chain: list[ViewNode], weights: dict[str, int]) -> None:
        """chain: innermost frame first, then its callers outwards."""
        cur = self.root
        self._add(cur.total, weights)
        for n in chain:
            key = n.frame.function()
            kids = self.index.setdefault(id(cur), {})
            nxt = kids.get(key)
            if nxt is None:
                nxt = kids[key] = empty(key, self.metrics)
                nxt.tid = n.tid
                cur.children.append(nxt)
            self._add(nxt.total, weights)
            cur = nxt
        self._add(cur.self, weights)

    def _add(self, dst: dict[str, int], weights: dict[str, int]) -> None:
        for m in self.metrics:
            dst[m] += weights[m]


@gc_paused
def bottom_up(root: ViewNode, focus: str | None = None) -> ViewNode:
    metrics = list(root.total)
    if focus is None:
        inv = _Inverter("bottom-up", metrics)
        for path, node in iter_paths(root):
            if any(node.self.values()):
                inv.charge(path[::-1], node.self)
        return inv.root
    inv = _Inverter(f"callers of {focus}", metrics)
    for callers, node in outermost_matches(root, matcher(focus)):
        inv.charge([node, *reversed(callers)], node.total)
    return inv.root
