"""The calling context tree: one per capture, paths of frames with self metrics at the nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from deepctx.host.frames import Frame


@dataclass
class Node:
    frame: Frame
    parent: int
    metrics: dict[str, int] = field(default_factory=dict)
    children: dict[Frame, int] = field(default_factory=dict)


class CallTree:
    def __init__(self, root_name: str) -> None:
        self.nodes: list[Node] = [Node(Frame("root", root_name), -1)]
        # facts of a node that are not part of its identity, by node index (a kernel's `compiled_from`)
        self.facts: dict[int, dict[str, Any]] = {}

    def node_for(self, path: Iterable[Frame], start: int = 0) -> int:
        """Index of the node at the end of path (created as needed); path starts below node `start`
        (the root by default)."""
        idx = start
        for frame in path:
            children = self.nodes[idx].children
            child = children.get(frame)
            if child is None:
                child = len(self.nodes)
                self.nodes.append(Node(frame, idx))
                children[frame] = child
            idx = child
        return idx

    def add(self, path: Sequence[Frame], metric: str, value: int) -> None:
        self.add_at(self.node_for(path), metric, value)

    def add_at(self, idx: int, metric: str, value: int) -> None:
        node = self.nodes[idx]
        node.metrics[metric] = node.metrics.get(metric, 0) + value

    def total(self, metric: str) -> int:
        return sum(n.metrics.get(metric, 0) for n in self.nodes)

    def preorder(self) -> Iterator[int]:
        """Node indices with every parent before its children (the flattened wire order)."""
        stack = [0]
        while stack:
            idx = stack.pop()
            yield idx
            stack.extend(reversed(list(self.nodes[idx].children.values())))

    def paths_with(self, metric: str) -> Iterator[tuple[list[Frame], int]]:
        """Every (path from below the root, self value) with a nonzero value of metric."""
        for idx, node in enumerate(self.nodes):
            v = node.metrics.get(metric, 0)
            if v:
                yield self.path_of(idx), v

    def path_of(self, idx: int) -> list[Frame]:
        path = []
        while idx > 0:
            path.append(self.nodes[idx].frame)
            idx = self.nodes[idx].parent
        path.reverse()
        return path


class PathNodes:
    """The nodes of call paths already walked, by the fields that made each path. A GPU capture's
    buckets (tens of thousands: call path x kernel x launch shape ...) share a few thousand call paths of
    up to a hundred frames or more: each is built and walked from the root once, not once per bucket."""

    def __init__(self, tree: CallTree) -> None:
        self.tree = tree
        self._nodes: dict[tuple, int] = {}

    def node(self, key: tuple, path: Callable[[], list[Frame]]) -> int:
        """The node at the end of path(), which only runs the first time key is seen."""
        idx = self._nodes.get(key)
        if idx is None:
            idx = self._nodes[key] = self.tree.node_for(path())
        return idx
