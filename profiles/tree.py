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
from operator import itemgetter
from typing import Any, NamedTuple, ParamSpec, TypeVar

from deepctx.profiles.fold import SHOW_ALL, ZONE_ROOTS, Fold, dispatch_frames, is_plumbing, is_startup
from deepctx.profiles.metrics import METRIC_UNITS, RANK_ORDER

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
    extra: dict[str, Any] = field(default_factory=dict)  # GPU launch facts: grid, block, shared_mem, stream ...

    def walk(self) -> Iterator[ViewNode]:
        """Preorder, iterative (trees can be thousands of levels deep)."""
        stack = [self]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children))


EXTRA_FIELDS = ("grid", "block", "shared_mem", "stream", "device", "compiled_from")


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
def from_doc(doc: dict[str, Any], fold: Fold = SHOW_ALL) -> ViewNode:
    """The document's tree as ViewNodes with totals for every metric in doc['metrics']. By default the tree
    as recorded; the views and exports pass the user's Fold (profiles/fold.py), which folds start-up and
    plumbing frames unless told otherwise."""
    metrics = list(doc["metrics"])
    root = doc["root"]
    out_root = _view_node(root, metrics)
    if not fold.any():
        _raw(root, out_root, metrics)
    else:
        _folded(root, out_root, metrics, fold)
    for vn in reversed(list(out_root.walk())):  # children before parents: totals add up bottom to top
        total = vn.self.copy()  # merged nodes added to their self values after they were made
        for c in vn.children:
            for m in metrics:
                total[m] += c.total[m]
        vn.total = total
    return out_root


def _raw(root: dict[str, Any], out_root: ViewNode, metrics: list[str]) -> None:
    """The document's siblings are distinct frames already: no lookups."""
    stack = [(root, out_root)]
    while stack:
        node, vn = stack.pop()
        for child in node["children"]:
            cvn = _view_node(child, metrics)
            vn.children.append(cvn)
            stack.append((child, cvn))


KIND_NAME, CHILDREN = itemgetter("kind", "name"), itemgetter("children")  # a document node's


def _folded(root: dict[str, Any], out_root: ViewNode, metrics: list[str], fold: Fold) -> None:
    """Folded frames hand their children (and self values) to another node, where they merge with its
    children of the same frame and thread id, recursively."""
    index: dict[int, dict[tuple[Frame, int | None], ViewNode]] = {}
    zone: set[int] = set()  # start-up frames kept: pruned below if folding took all they held

    def child_of(parent: ViewNode, node: dict[str, Any]) -> ViewNode:
        kids = index.get(id(parent))
        if kids is None:
            kids = index[id(parent)] = {(c.frame, c.tid): c for c in parent.children}
        vn = _view_node(node, metrics)
        found = kids.get((vn.frame, vn.tid))
        if found is None:
            kids[(vn.frame, vn.tid)] = vn
            parent.children.append(vn)
            return vn
        add_into(found.self, vn.self)
        return found

    folded = {"startup": 0, "plumbing": 0, "dispatch": 0}  # frames folded away: the views' header says so
    dispatch = dispatch_frames(root, KIND_NAME, CHILDREN) if fold.dispatch else set()
    # (document node, the ViewNode it became, its thread's (or the root's) ViewNode, still above Python)
    stack: list[tuple[dict[str, Any], ViewNode, ViewNode, bool]] = [(root, out_root, out_root, True)]
    while stack:
        node, vn, base, above = stack.pop()
        for child in node["children"]:
            kind = child["kind"]
            if kind in ZONE_ROOTS:
                cvn = child_of(vn, child)
                stack.append((child, cvn, cvn, True))
            elif fold.plumbing and is_plumbing(kind, child["name"], child["file"]):
                into = base if above and fold.startup else vn  # plumbing as the outermost Python frame: lifted too
                add_into(into.self, {m: child["metrics"].get(m, 0) for m in metrics})
                folded["plumbing"] += 1
                stack.append((child, into, base, False))
            elif id(child) in dispatch:  # a native frame around an operator: into its caller, as plumbing
                add_into(vn.self, {m: child["metrics"].get(m, 0) for m in metrics})
                folded["dispatch"] += 1
                stack.append((child, vn, base, above))
            elif above and kind == "python" and fold.startup:
                folded["startup"] += vn is not base
                stack.append((child, child_of(base, child), base, False))
            else:
                cvn = child_of(vn, child)
                if above and fold.startup and is_startup(kind):
                    zone.add(id(cvn))
                stack.append((child, cvn, base, above and is_startup(kind)))
    if zone:
        _prune(out_root, zone)
    out_root.extra["folded"] = folded


def _prune(root: ViewNode, zone: set[int]) -> None:
    """Start-up frames left with no children and no values of their own (everything below them was Python,
    now under their thread) go: children before parents, so emptied chains go whole."""
    for vn in reversed(list(root.walk())):
        if vn.children:
            vn.children = [c for c in vn.children if not (id(c) in zone and not c.children and not any(c.self.values()))]


def _view_node(node: dict[str, Any], metrics: list[str]) -> ViewNode:
    values = node["metrics"]
    self_v = {m: values.get(m, 0) for m in metrics}
    extra = {k: node[k] for k in EXTRA_FIELDS if k in node and node[k] is not None} if len(node) > 7 else {}
    frame = Frame(node["kind"], node["name"], node["file"], node["line"], node["module"])
    return ViewNode(frame, self_v, self_v.copy(), [], node.get("tid"), extra)


def origin_lines(compiled_from: dict[str, Any] | None) -> str:
    """A compiled kernel's model lines, short: 'model.py:17, 18, 19' (a file's basename once, then its lines)."""
    if not compiled_from:
        return ""
    parts: list[str] = []
    last = None
    for s in compiled_from.get("lines") or []:
        base = s["file"].rsplit("/", 1)[-1]
        parts.append(f"{base}:{s['line']}" if base != last else str(s["line"]))
        last = base
    return ", ".join(parts)


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
