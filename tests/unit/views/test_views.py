"""Top-down, bottom-up, flat and focus views on the H200 fixtures and synthetic profiles, exact numbers."""

from __future__ import annotations

from synth import Builder, nat, py, thread

from deepctx.cli.views.bottomup import bottom_up
from deepctx.cli.views.flat import flat, sorted_rows
from deepctx.cli.views.focus import focus_tree, matcher
from deepctx.cli.views.model import Frame, from_doc, nonzero_metrics, pick_metric
from deepctx.cli.views.topdown import rows

ELEMENTWISE = "[kernel stub [heap]+0x88245c0]"  # torch_ops: x * 2, 1000 launches (LINE_MUL)


def test_totals_of_the_torch_fixture(torch_doc) -> None:
    root = from_doc(torch_doc)
    assert root.total == {"cpu_samples": 33, "calls": 1201, "api_time_ns": 63315639, "gpu_time_ns": 0,
                          "bytes": 302122184, "sync_wait_ns": 50582754}
    assert pick_metric(root) == "cpu_samples"
    assert nonzero_metrics(root) == ["cpu_samples", "calls", "api_time_ns", "bytes", "sync_wait_ns"]
    threads = {c.tid: c.total["cpu_samples"] for c in root.children}
    assert threads == {610: 20, 627: 13}


def test_flat_view_counts_the_elementwise_launches(torch_doc) -> None:
    top = sorted_rows(flat(from_doc(torch_doc)), "calls")
    assert [(r.frame.kind, r.frame.name, r.self["calls"]) for r in top[:4]] == [
        ("kernel", ELEMENTWISE, 1000), ("memcpy", "DtoH", 50), ("kernel", "[kernel stub [heap]+0x901e240]", 50),
        ("sync", "stream", 50)]
    launch = next(r for r in top if r.frame.kind == "api" and r.frame.name == "cudaLaunchKernel")
    assert launch.self["calls"] == 0 and launch.total["calls"] == 1071 and launch.nodes == 4
    assert top[0].total["api_time_ns"] == 7567341
    assert sum(r.self["calls"] for r in top) == 1201  # every call counted once, threads left out
    assert not any(r.frame.kind == "thread" for r in top)


def test_top_down_rows_follow_the_hot_path(torch_doc) -> None:
    root = from_doc(torch_doc)
    visible, hidden = rows(root, "calls", min_percent=50)
    names = [r.node.frame.name for r in visible]
    assert names[0] == "python3" and names[-2:] == ["cudaLaunchKernel", ELEMENTWISE]
    assert visible[-1].node.total["calls"] == 1000 and visible[-1].depth == len(visible) - 1
    assert hidden == 216 - 1 - len(visible)  # every other node is hidden, none lost


def test_bottom_up_roots_are_where_values_were_measured(torch_doc) -> None:
    bu = bottom_up(from_doc(torch_doc))
    roots = {(c.frame.kind, c.frame.name): c for c in bu.children}
    k = roots[("kernel", ELEMENTWISE)]
    assert k.total["calls"] == 1000 and bu.total["calls"] == 1201
    assert [c.frame.name for c in k.children] == ["cudaLaunchKernel"]
    chain = []
    node = k
    while node.children:
        node = node.children[0]
        chain.append(node.frame.name)
    assert chain[-1] == "python3" and node.self["calls"] == 1000  # outermost caller: the thread


def test_bottom_up_with_focus_lists_the_callers(torch_doc) -> None:
    bu = bottom_up(from_doc(torch_doc), focus="^cudaLaunchKernel$")
    assert [(c.frame.kind, c.total["calls"]) for c in bu.children] == [("native", 0), ("api", 1071)]
    api = bu.children[1]
    callers = sorted((c.total["calls"], c.frame.name[:40]) for c in api.children)
    assert [v for v, _ in callers] == [1, 20, 50, 1000]


def test_focus_tree_merges_all_occurrences(torch_doc) -> None:
    f = focus_tree(from_doc(torch_doc), "cudaStreamSynchronize")
    assert [(c.frame.kind, c.total["calls"], c.total["sync_wait_ns"]) for c in f.children] == [("api", 50, 237578)]
    assert f.children[0].children[0].frame == Frame("sync", "stream")


def test_matcher_takes_invalid_regex_literally_and_matches_file_lines() -> None:
    m = matcher("operator()(")
    assert m(Frame("native", "Foo::operator()(int)")) and not m(Frame("native", "operator"))
    assert matcher("train.py:14")(Frame("python", "read", "/x/train.py", 14))
    assert not matcher(".")(Frame("thread", "t"))


def test_recursion_counts_once_in_flat_totals() -> None:
    b = Builder()
    t = thread("main", 1)
    f = nat("fib")
    b.add([t, f, f, f], cpu_samples=5)
    b.add([t, f], cpu_samples=1)
    b.add([t, f, f, nat("leaf")], cpu_samples=2)
    rows_ = {r.frame.name: r for r in flat(from_doc(b.doc))}
    assert rows_["fib"].self["cpu_samples"] == 6 and rows_["fib"].total["cpu_samples"] == 8
    assert rows_["leaf"].total["cpu_samples"] == 2 and rows_["fib"].nodes == 3


def test_python_lines_are_merged_into_functions(gpu_doc) -> None:
    rows_ = {(r.frame.kind, r.frame.name): r for r in flat(from_doc(gpu_doc))}
    main = rows_[("python", "main")]
    assert main.frame.line is None and main.nodes == 2  # lines 21 and 22
    assert main.self["cpu_samples"] == 30 and main.total["cpu_samples"] == 47
    assert main.total["calls"] == 1100


def test_frames_with_the_same_name_in_other_files_stay_apart() -> None:
    b = Builder()
    t = thread("main", 1)
    b.add([t, py("step", "/a.py", 1)], cpu_samples=1)
    b.add([t, py("step", "/b.py", 1)], cpu_samples=2)
    assert sorted(r.self["cpu_samples"] for r in flat(from_doc(b.doc))) == [1, 2]
