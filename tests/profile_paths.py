"""Reading profile JSON documents in tests: paths of frame names and the metric values under them."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def walk(doc: dict[str, Any]) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(ancestors from below the root, node) for every node."""
    stack: list[tuple[list[dict[str, Any]], dict[str, Any]]] = [([], c) for c in doc["root"]["children"]]
    while stack:
        anc, node = stack.pop()
        yield anc, node
        stack.extend((anc + [node], c) for c in node["children"])


def self_paths(doc: dict[str, Any], metric: str = "cpu_samples") -> list[tuple[list[dict[str, Any]], int]]:
    """Every (path of nodes from below the root to the node, self value) with a nonzero value."""
    return [(anc + [n], n["metrics"][metric]) for anc, n in walk(doc) if n["metrics"].get(metric)]


def total(doc: dict[str, Any], metric: str = "cpu_samples") -> int:
    return sum(v for _, v in self_paths(doc, metric))


def contains_chain(names: Sequence[str], chain: Sequence[str]) -> bool:
    """chain appears in names as consecutive elements."""
    n = len(chain)
    return any(list(names[i:i + n]) == list(chain) for i in range(len(names) - n + 1))


def value_under_chain(doc: dict[str, Any], chain: Sequence[str], metric: str = "cpu_samples") -> int:
    """Self values of all nodes whose path contains chain (consecutive frame names)."""
    return sum(v for path, v in self_paths(doc, metric) if contains_chain([n["name"] for n in path], chain))


def pc_sampled_with_source(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """The constructed PC-sampled profile (tests/fixtures/profiles/pcs_constructed.json) with its kernel
    lines pointed at a copy of the fixture's CUDA source in tmp_path: (document, that source)."""
    fixtures = Path(__file__).resolve().parent / "fixtures"
    cu = tmp_path / "pcs_kernels.cu"
    cu.write_text((fixtures / "cubin" / "pcs_kernels.cu").read_text())
    doc = json.loads((fixtures / "profiles" / "pcs_constructed.json").read_text())
    for _, node in walk(doc):
        if node["kind"] == "gpu_line":
            node["file"] = str(cu)
    return doc, cu
