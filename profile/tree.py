"""The view model: frames, metric facts and the tree of ViewNodes every view and format works on.

The profile document's nodes carry self values only; a ViewNode carries self and total (inclusive)
values for every metric, computed once, so views can sort and filter by any metric without walking
subtrees again.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, ParamSpec, TypeVar

from deepctx.profile.metrics import METRIC_UNITS, RANK_ORDER

P = ParamSpec("P")
R = TypeVar("R")

GPU_KINDS = frozenset({"kernel", "memcpy", "memset", "sync"})


class Frame(NamedTuple):
    """A node's identity: two siblings never share one (docs/formats.md, NODE)."""

    kind: str
    name: str
    file: str | None = None
    line: int | None = None
    module: str | None = None

    def function(self) -> Frame:
        """The function this frame belongs to: lines merged (flat and bottom-up views aggregate by it)."""
        return self._replace(line=None) if self.line is not None else self

    def label(self) -> str:
        """One-line text for terminals and exports: name, then where it is."""
        if self.kind == "thread":
            return f"[thread] {self.name}"
        where = ""
        if self.file:
            where = f"  {self.file}" + (f":{self.line}" if self.line else "")
        elif self.module and self.kind == "native":
            where = f"  {self.module}"
        tag = f"  [{self.kind}]" if self.kind not in ("python", "native", "root") else ""
        return f"{self.name}{where}{tag}"


@dataclass(eq=False)
class ViewNode:
    frame: Frame
    self: dict[str, int]
    total: dict[str, int]
    children: list[ViewNode] = field(default_factory=list)
    tid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # GPU launch facts: grid, block, shared_mem, stream

    def walk(self) -> Iterator[ViewNode]:
        """Preorder, iterative (trees can be thousands of levels deep)."""
        stack = [self]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children))


EXTRA_FIELDS = ("grid", "block", "shared_mem", "stream", "device")


def gc_paused(fn: Callable[P, R]) -> Callable[P, R]:
    """Runs fn with the cyclic garbage collector off. Building 100k-node trees allocates so many objects
    that the collector's full passes cost 3x the work itself; these trees hold no cycles."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return run


@gc_paused
def from_doc(doc: dict[str, Any]) -> ViewNode:
    """The document's tree as ViewNodes with totals for every metric in doc['metrics']."""
    metrics = list(doc["metrics"])
    root = doc["root"]
    order: list[tuple[dict[str, Any], ViewNode]] = []
    out_root = _view_node(root, metrics)
    stack = [(root, out_root)]
    while stack:
        node, vn = stack.pop()
        order.append((node, vn))
        for child in node["children"]:
            cvn = _view_node(child, metrics)
            vn.children.append(cvn)
            stack.append((child, cvn))
    for _, vn in reversed(order):  # children before parents: totals add up bottom to top
        for c in vn.children:
            for m in metrics:
                vn.total[m] += c.total[m]
    return out_root


def _view_node(node: dict[str, Any], metrics: list[str]) -> ViewNode:
    values = node["metrics"]
    self_v = {m: values.get(m, 0) for m in metrics}
    extra = {k: node[k] for k in EXTRA_FIELDS if k in node and node[k] is not None} if len(node) > 7 else {}
    frame = Frame(node["kind"], node["name"], node["file"], node["line"], node["module"])
    return ViewNode(frame, self_v, self_v.copy(), [], node.get("tid"), extra)


def pick_metric(root: ViewNode, wanted: str | None = None) -> str:
    """wanted if given and present, else the first metric of RANK_ORDER with a nonzero total (GPU time where
    the profile has any)."""
    if wanted:
        if wanted not in root.total:
            raise KeyError(wanted)
        return wanted
    for m in RANK_ORDER:
        if root.total.get(m):
            return m
    return "cpu_samples" if "cpu_samples" in root.total else next(iter(root.total))


def nonzero_metrics(root: ViewNode) -> list[str]:
    """Metrics with a nonzero total, in METRIC_UNITS order (then any unknown ones)."""
    known = [m for m in METRIC_UNITS if root.total.get(m)]
    return known + [m for m in root.total if m not in METRIC_UNITS and root.total[m]]


def add_into(dst: dict[str, int], src: dict[str, int]) -> None:
    for k, v in src.items():
        dst[k] = dst.get(k, 0) + v


def iter_paths(root: ViewNode) -> Iterator[tuple[list[ViewNode], ViewNode]]:
    """(path from below the root to the node, node) for every node below the root, in preorder.

    The path list is shared and changes as the walk goes on: copy it to keep it.
    """
    path: list[ViewNode] = []
    stack: list[tuple[ViewNode, int]] = [(c, 0) for c in reversed(root.children)]
    while stack:
        node, depth = stack.pop()
        del path[depth:]
        path.append(node)
        yield path, node
        stack.extend((c, depth + 1) for c in reversed(node.children))
