"""Merging profile documents: same path adds, new paths are kept, the tree stays valid."""

from __future__ import annotations

import copy

import store_producer as sp

from deepctx.daemon.store.wire import to_message
from deepctx.profiles.merge import merge_documents


def node(kind: str, name: str, cpu: int = 0, children: list | None = None, **kw: object) -> dict:
    d = {"kind": kind, "name": name, "file": None, "line": None, "module": None, "metrics": {"cpu_samples": cpu},
         "children": children or []}
    d.update(kw)
    return d


def doc(root: dict, pid: int = 1, command: str = "a") -> dict:
    return {"schema": "deepctx.profile/v1", "pid": pid, "command": command, "hostname": "h", "started_unix": 10.0,
            "duration_s": 5.0, "ended": "duration", "sample_hz": 99, "mode": None, "metrics": ["cpu_samples"],
            "root": root, "stats": {"cpu_samples": 1, "cpu_user_stacks_lost": 2}, "warnings": ["w"]}


def test_same_path_adds_and_new_paths_are_kept() -> None:
    a = doc(node("root", "a", children=[node("thread", "t", tid=1, children=[node("native", "f", 3)])]))
    b = doc(node("root", "a", children=[node("thread", "t", tid=1, children=[node("native", "f", 4),
                                                                               node("native", "g", 5)]),
                                         node("thread", "t", tid=2, children=[node("native", "f", 6)])]))
    b["started_unix"] = 20.0
    m = merge_documents([a, b])
    t1, t2 = m["root"]["children"]
    assert (t1["tid"], t2["tid"]) == (1, 2)  # threads of one name stay apart by tid
    assert [(c["name"], c["metrics"]["cpu_samples"]) for c in t1["children"]] == [("f", 7), ("g", 5)]
    assert t2["children"][0]["metrics"] == {"cpu_samples": 6}
    assert m["stats"] == {"cpu_samples": 2, "cpu_user_stacks_lost": 4, "windows": 2}
    assert m["warnings"] == ["w"]
    assert (m["started_unix"], m["duration_s"]) == (10.0, 15.0)
    assert "_index" not in str(m)


def test_python_lines_are_distinct_paths() -> None:
    a = doc(node("root", "a", children=[node("python", "f", 1, file="x.py", line=3)]))
    b = doc(node("root", "a", children=[node("python", "f", 1, file="x.py", line=4)]))
    assert [c["line"] for c in merge_documents([a, b])["root"]["children"]] == [3, 4]


def test_fixture_merged_with_itself_doubles_and_converts() -> None:
    fx = sp.fixture("h200_jax_jit")
    m = merge_documents([fx, copy.deepcopy(fx)])
    assert sp.totals(m) == {k: 2 * v for k, v in sp.totals(fx).items()}
    msg = to_message(m)  # a valid flattened tree: parents before children
    assert all(n.parent < i for i, n in enumerate(msg.nodes))
    assert len(msg.nodes) == 4005


def test_nothing_to_merge() -> None:
    assert merge_documents([]) is None
