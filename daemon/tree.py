"""The calling context tree: one per capture, paths of frames with self metrics at the nodes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from deepctx.daemon.frames import Frame

METRICS = ("cpu_samples", "calls", "api_time_ns", "gpu_time_ns", "bytes", "sync_wait_ns")


@dataclass
class Node:
    frame: Frame
    parent: int
    metrics: dict[str, int] = field(default_factory=dict)
    children: dict[Frame, int] = field(default_factory=dict)


class CallTree:
    def __init__(self, root_name: str) -> None:
        self.nodes: list[Node] = [Node(Frame("root", root_name), -1)]

    def node_for(self, path: Iterable[Frame]) -> int:
        """Index of the node at the end of path (created as needed); path starts below the root."""
        idx = 0
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
        node = self.nodes[self.node_for(path)]
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
