"""Focus on a frame: which frames match NAME, and the merged subtrees below the outermost matches."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from deepctx.cli.views.merge import empty, merge_into
from deepctx.profiles.tree import Frame, ViewNode, gc_paused

Matcher = Callable[[Frame], bool]


def matcher(pattern: str) -> Matcher:
    """A regular expression searched in the frame's name and, for frames with a file, in 'file:line'.

    A pattern that is not a valid regular expression is taken literally (C++ names are full of
    brackets and parentheses).
    """
    try:
        rx = re.compile(pattern)
    except re.error:
        rx = re.compile(re.escape(pattern))

    def match(frame: Frame) -> bool:
        if frame.kind in ("root", "thread"):
            return False
        if rx.search(frame.name):
            return True
        return bool(frame.file) and bool(rx.search(f"{frame.file}:{frame.line or ''}"))

    return match


def outermost_matches(root: ViewNode, match: Matcher) -> Iterator[tuple[list[ViewNode], ViewNode]]:
    """(callers from below the root, node) for every matching node with no matching caller.

    Counting only the outermost match of each path keeps recursive functions from counting twice.
    """
    stack: list[tuple[ViewNode, list[ViewNode]]] = [(c, []) for c in reversed(root.children)]
    while stack:
        node, callers = stack.pop()
        if match(node.frame):
            yield callers, node
            continue
        below = callers + [node]
        stack.extend((c, below) for c in reversed(node.children))


@gc_paused
def focus_tree(root: ViewNode, pattern: str) -> ViewNode:
    """What the matching frames call: one child of a new root per matching frame, its occurrences merged."""
    metrics = list(root.total)
    out = empty(Frame("root", f"focus: {pattern}"), metrics)
    index: dict[Frame, ViewNode] = {}
    for _, node in outermost_matches(root, matcher(pattern)):
        dst = index.get(node.frame)
        if dst is None:
            dst = index[node.frame] = empty(node.frame, metrics)
            dst.extra = dict(node.extra)
            out.children.append(dst)
        merge_into(dst, node)
        for m in metrics:
            out.total[m] += node.total[m]
    return out
