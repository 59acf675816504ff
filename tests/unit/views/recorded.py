"""Facts of the recorded H200 profiles, computed straight from their JSON without any deepctx code.

The view and export tests compare deepctx's numbers with these independent counts, so a re-recorded
fixture (other pid, totals, node counts, kernel names) needs no new literals, while every check stays exact.
"""

from __future__ import annotations

import json
import lzma
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness import line_of

Node = dict[str, Any]
TESTS = Path(__file__).resolve().parents[2]
TORCH_TARGET = TESTS / "gpu" / "targets" / "torch_ops.py"
N_MUL = 1000  # torch_ops.py: launches of x * 2 on the LINE_MUL line


def read(path: str | Path) -> dict[str, Any]:
    return json.loads(lzma.decompress(Path(path).read_bytes()))


def nodes(doc: dict[str, Any]) -> Iterator[tuple[list[Node], Node]]:
    """(ancestors from below the root, node) for every node below the root, in preorder."""
    stack: list[tuple[list[Node], Node]] = [([], c) for c in reversed(doc["root"]["children"])]
    while stack:
        anc, node = stack.pop()
        yield anc, node
        stack.extend((anc + [node], c) for c in reversed(node["children"]))


def node_count(doc: dict[str, Any]) -> int:
    """Every node, the root included."""
    return 1 + sum(1 for _ in nodes(doc))


def inclusive(node: Node, metric: str) -> int:
    total, stack = 0, [node]
    while stack:
        n = stack.pop()
        total += n["metrics"].get(metric, 0)
        stack.extend(n["children"])
    return total


def metric_total(doc: dict[str, Any], metric: str) -> int:
    return inclusive(doc["root"], metric)


def totals(doc: dict[str, Any]) -> dict[str, int]:
    return {m: metric_total(doc, m) for m in doc["metrics"]}


def thread_samples(doc: dict[str, Any]) -> dict[int, int]:
    """tid -> CPU samples of each thread node."""
    return {t["tid"]: inclusive(t, "cpu_samples") for t in doc["root"]["children"] if t["kind"] == "thread"}


def function(node: Node) -> tuple[Any, ...]:
    """A frame with its line dropped: what flat and bottom-up views merge on."""
    return node["kind"], node["name"], node.get("file"), node.get("module")


def the_node(doc: dict[str, Any], pred: Callable[[list[Node], Node], bool]) -> tuple[list[Node], Node]:
    """The one (ancestors, node) that pred holds for."""
    found = [(anc, n) for anc, n in nodes(doc) if pred(anc, n)]
    assert len(found) == 1, [n["name"] for _, n in found]
    return found[0]


def elementwise(doc: dict[str, Any]) -> tuple[list[Node], Node]:
    """torch_ops: the one kernel launched below the Python frame of the LINE_MUL line (x * 2)."""
    line = line_of(TORCH_TARGET, "LINE_MUL")

    def under_mul(anc: list[Node], n: Node) -> bool:
        return n["kind"] == "kernel" and any(
            a["kind"] == "python" and (a["file"] or "").endswith("gpu/targets/torch_ops.py") and a["line"] == line
            for a in anc)

    anc, kernel = the_node(doc, under_mul)
    assert "vectorized_elementwise_kernel" in kernel["name"]
    return anc, kernel


def outermost(doc: dict[str, Any], pattern: str) -> list[tuple[list[Node], Node]]:
    """Nodes whose name the regular expression matches and none of whose callers it matches, in preorder."""
    rx = re.compile(pattern)
    out = []
    stack: list[tuple[list[Node], Node]] = [([], c) for c in reversed(doc["root"]["children"])]
    while stack:
        anc, n = stack.pop()
        if n["kind"] != "thread" and rx.search(n["name"]):
            out.append((anc, n))
            continue
        stack.extend((anc + [n], c) for c in reversed(n["children"]))
    return out


def bottom_up_tree(doc: dict[str, Any]) -> dict[tuple[Any, ...], Any]:
    """Every node's self values charged to it and its callers, innermost first, lines dropped:
    {function: (totals, {caller function: ...})}."""
    metrics = list(doc["metrics"])
    tree: dict[tuple[Any, ...], Any] = {}
    for anc, n in nodes(doc):
        if not any(n["metrics"].get(m, 0) for m in metrics):
            continue
        level = tree
        for f in [n, *reversed(anc)]:
            values, callers = level.setdefault(function(f), (dict.fromkeys(metrics, 0), {}))
            for m in metrics:
                values[m] += n["metrics"].get(m, 0)
            level = callers
    return tree
