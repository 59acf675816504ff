"""Merging ViewNode subtrees by frame: the building block of focus and bottom-up trees."""

from __future__ import annotations

from deepctx.profiles.tree import Frame, ViewNode, add_into


def empty(frame: Frame, metrics: list[str]) -> ViewNode:
    return ViewNode(frame, dict.fromkeys(metrics, 0), dict.fromkeys(metrics, 0))


def merge_into(dst: ViewNode, src: ViewNode) -> None:
    """Adds src's values and subtree into dst; children with the same frame become one node."""
    stack = [(dst, src)]
    while stack:
        d, s = stack.pop()
        add_into(d.self, s.self)
        add_into(d.total, s.total)
        index = {c.frame: c for c in d.children}
        for sc in s.children:
            dc = index.get(sc.frame)
            if dc is None:
                dc = empty(sc.frame, list(sc.self))
                dc.tid, dc.extra = sc.tid, dict(sc.extra)
                d.children.append(dc)
                index[sc.frame] = dc
            stack.append((dc, sc))
