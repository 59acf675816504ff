"""Diff of two profiles: per call path and per GPU kernel, what grew, shrank, appeared and vanished.

Call paths are matched frame by frame. Thread nodes match by thread name (thread ids differ from run to
run), so threads of one name are merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deepctx.profiles.tree import GPU_KINDS, Frame, ViewNode, gc_paused

STATUSES = ("appeared", "vanished", "grew", "shrank", "same")


def status_of(before: int, after: int) -> str:
    if before == after:
        return "same"
    if before == 0:
        return "appeared"
    if after == 0:
        return "vanished"
    return "grew" if after > before else "shrank"


@dataclass(eq=False)
class DiffNode:
    frame: Frame
    before_self: dict[str, int]
    before_total: dict[str, int]
    after_self: dict[str, int]
    after_total: dict[str, int]
    children: list[DiffNode] = field(default_factory=list)

    def delta(self, metric: str, by: str = "total") -> int:
        if by == "self":
            return self.after_self.get(metric, 0) - self.before_self.get(metric, 0)
        return self.after_total.get(metric, 0) - self.before_total.get(metric, 0)

    def status(self, metric: str, by: str = "total") -> str:
        if by == "self":
            return status_of(self.before_self.get(metric, 0), self.after_self.get(metric, 0))
        return status_of(self.before_total.get(metric, 0), self.after_total.get(metric, 0))


def _zero(metrics: list[str]) -> dict[str, int]:
    return dict.fromkeys(metrics, 0)


@gc_paused
def diff_tree(before: ViewNode, after: ViewNode) -> DiffNode:
    """The union of both trees, each node with its values before and after."""
    metrics = list(dict.fromkeys([*before.total, *after.total]))
    root = DiffNode(Frame("root", after.frame.name), _zero(metrics), _zero(metrics), _zero(metrics), _zero(metrics))
    # Lists, not single nodes: sibling threads of one name are merged into one node.
    stack: list[tuple[DiffNode, list[ViewNode], list[ViewNode]]] = [(root, [before], [after])]
    while stack:
        d, bs, as_ = stack.pop()
        pairs: dict[Frame, tuple[list[ViewNode], list[ViewNode]]] = {}
        for b in bs:
            _add(d.before_self, b.self)
            _add(d.before_total, b.total)
            for c in b.children:
                pairs.setdefault(c.frame, ([], []))[0].append(c)
        for a in as_:
            _add(d.after_self, a.self)
            _add(d.after_total, a.total)
            for c in a.children:
                pairs.setdefault(c.frame, ([], []))[1].append(c)
        for frame, (cb, ca) in pairs.items():
            child = DiffNode(frame, _zero(metrics), _zero(metrics), _zero(metrics), _zero(metrics))
            d.children.append(child)
            stack.append((child, cb, ca))
    return root


def _add(dst: dict[str, int], src: dict[str, int]) -> None:
    for k, v in src.items():
        dst[k] = dst.get(k, 0) + v


@dataclass
class PathChange:
    path: tuple[Frame, ...]
    before: int
    after: int

    @property
    def delta(self) -> int:
        return self.after - self.before

    @property
    def status(self) -> str:
        return status_of(self.before, self.after)


def path_changes(root: DiffNode, metric: str) -> list[PathChange]:
    """Every call path whose self value of metric changed, largest change first."""
    out: list[PathChange] = []
    stack: list[tuple[DiffNode, tuple[Frame, ...]]] = [(c, (c.frame,)) for c in root.children]
    while stack:
        node, path = stack.pop()
        b, a = node.before_self.get(metric, 0), node.after_self.get(metric, 0)
        if a != b:
            out.append(PathChange(path, b, a))
        stack.extend((c, path + (c.frame,)) for c in node.children)
    out.sort(key=lambda c: (-abs(c.delta), c.path))
    return out


@dataclass
class KernelChange:
    frame: Frame  # kind and name of the GPU activity
    before: dict[str, int]
    after: dict[str, int]

    def delta(self, metric: str) -> int:
        return self.after.get(metric, 0) - self.before.get(metric, 0)

    def status(self, metric: str) -> str:
        if not any(self.before.values()):
            return "appeared"
        if not any(self.after.values()):
            return "vanished"
        return status_of(self.before.get(metric, 0), self.after.get(metric, 0))


def kernel_metric(root: DiffNode) -> str:
    """The metric kernels are compared by: device time when it was measured, else API time, else calls."""
    for m in ("gpu_time_ns", "api_time_ns", "calls"):
        if root.before_total.get(m) or root.after_total.get(m):
            return m
    return "calls"


def kernel_changes(root: DiffNode) -> list[KernelChange]:
    """GPU activity (kernels, copies, sets, syncs) summed by kind and name over all call paths."""
    by: dict[Frame, KernelChange] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.frame.kind not in GPU_KINDS:
            continue
        key = Frame(node.frame.kind, node.frame.name)
        kc = by.get(key)
        if kc is None:
            kc = by[key] = KernelChange(key, {}, {})
        _add(kc.before, node.before_self)
        _add(kc.after, node.after_self)
    metric = kernel_metric(root)
    return sorted(by.values(), key=lambda k: (-abs(k.delta(metric)), k.frame.name))
