"""Tree building, the wire message and the JSON document (schema deepctx.profile/v1)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from deepctx.daemon.capture import CaptureResult
from deepctx.daemon.profile_wire import to_message
from deepctx.daemon.tree import CallTree, PathNodes
from deepctx.host.frames import Frame, thread_frame
from deepctx.profiles.document import to_doc
from deepctx.profiles.metrics import METRICS

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "profile.schema.json").read_text())

T1 = thread_frame(101, "main")
T2 = thread_frame(102, "worker")
MAIN = Frame("native", "main", module="app")
OUTER = Frame("native", "outer", module="app")
HOT = Frame("native", "hot_loop", module="app")
PY = Frame("python", "step", file="/srv/train.py", line=42)


def sample_tree() -> CallTree:
    t = CallTree("app --flag")
    t.add([T1, MAIN, OUTER, HOT], "cpu_samples", 80)
    t.add([T1, MAIN, OUTER], "cpu_samples", 5)
    t.add([T1, MAIN, PY], "cpu_samples", 10)
    t.add([T2, MAIN], "cpu_samples", 5)
    t.add([T1, MAIN, OUTER, HOT], "cpu_samples", 20)  # same path again: same node
    return t


def test_tree_merges_equal_paths_and_keeps_self_values() -> None:
    t = sample_tree()
    assert len(t.nodes) == 1 + 4 + 1 + 2  # root, T1 main outer hot, PY, T2 main
    assert t.total("cpu_samples") == 120
    hot = t.node_for([T1, MAIN, OUTER, HOT])
    assert t.nodes[hot].metrics == {"cpu_samples": 100}
    assert t.path_of(hot) == [T1, MAIN, OUTER, HOT]
    # Same frame under another parent is another node.
    assert t.node_for([T2, MAIN]) != t.node_for([T1, MAIN])


def test_path_nodes_walk_each_keyed_path_once_and_land_where_a_full_walk_does() -> None:
    t = sample_tree()
    memo = PathNodes(t)
    built: list[str] = []

    def path(name: str) -> list[Frame]:
        built.append(name)
        return [T1, MAIN, OUTER] if name == "outer" else [T2, MAIN]

    outer = memo.node(("k", 1), lambda: path("outer"))
    assert outer == t.node_for([T1, MAIN, OUTER])  # an existing node, none added
    assert memo.node(("k", 1), lambda: path("outer")) == outer
    assert memo.node(("k", 2), lambda: path("t2")) == t.node_for([T2, MAIN])
    assert built == ["outer", "t2"]
    n = len(t.nodes)
    leaf = t.node_for([HOT], start=outer)  # below a memoized node: the node the full path names
    assert leaf == t.node_for([T1, MAIN, OUTER, HOT]) and len(t.nodes) == n
    t.add_at(leaf, "cpu_samples", 1)
    assert t.nodes[leaf].metrics == {"cpu_samples": 101}


def test_python_frames_on_other_lines_are_other_nodes() -> None:
    t = CallTree("x")
    a = t.node_for([T1, PY])
    b = t.node_for([T1, PY._replace(line=43)])
    assert a != b


def test_preorder_lists_parents_before_children() -> None:
    t = sample_tree()
    seen = set()
    order = list(t.preorder())
    assert sorted(order) == list(range(len(t.nodes)))
    for idx in order:
        if idx:
            assert t.nodes[idx].parent in seen
        seen.add(idx)


def make_result(tree: CallTree) -> CaptureResult:
    return CaptureResult(pid=4242, command="app --flag", duration_s=3.0, started_unix=1.7e9, ended="duration",
                         sample_hz=99, tree=tree, stats={"cpu_samples": 120, "cpu_user_stacks_lost": 0},
                         warnings=["w1"], hostname="h")


def test_json_document_follows_the_schema_and_keeps_every_fact() -> None:
    doc = to_doc(to_message(make_result(sample_tree())))
    jsonschema.validate(doc, SCHEMA)
    assert doc["schema"] == "deepctx.profile/v1"
    assert doc["metrics"] == list(METRICS)
    assert doc["pid"] == 4242 and doc["command"] == "app --flag" and doc["duration_s"] == 3.0
    assert doc["stats"] == {"cpu_samples": 120, "cpu_user_stacks_lost": 0}
    root = doc["root"]
    assert root["kind"] == "root" and root["file"] is None and root["line"] is None
    threads = {c["tid"]: c for c in root["children"]}
    assert set(threads) == {101, 102}
    main = threads[101]["children"][0]
    assert main == {**main, "kind": "native", "name": "main", "module": "app", "file": None, "line": None}
    by_name = {c["name"]: c for c in main["children"]}
    assert by_name["step"]["file"] == "/srv/train.py" and by_name["step"]["line"] == 42
    assert by_name["step"]["module"] is None
    assert by_name["step"]["metrics"]["cpu_samples"] == 10
    assert by_name["outer"]["metrics"]["cpu_samples"] == 5
    assert by_name["outer"]["children"][0]["metrics"] == {m: (100 if m == "cpu_samples" else 0) for m in METRICS}


def test_schema_rejects_a_node_without_its_fields() -> None:
    doc = to_doc(to_message(make_result(sample_tree())))
    del doc["root"]["children"][0]["file"]
    try:
        jsonschema.validate(doc, SCHEMA)
    except jsonschema.ValidationError as e:
        assert "'file' is a required property" in e.message
    else:
        raise AssertionError("schema accepted a node without 'file'")


def test_empty_profile_has_only_the_root() -> None:
    doc = to_doc(to_message(make_result(CallTree("idle"))))
    jsonschema.validate(doc, SCHEMA)
    assert doc["root"]["children"] == [] and doc["root"]["name"] == "idle"
