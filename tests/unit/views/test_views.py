"""Top-down, bottom-up, flat and focus views on the H200 fixtures and synthetic profiles, exact numbers."""

from __future__ import annotations

import recorded
from harness import line_of
from synth import Builder, frame, nat, py, thread

from deepctx.cli.views.bottomup import bottom_up
from deepctx.cli.views.flat import flat, sorted_rows
from deepctx.cli.views.focus import focus_tree, matcher
from deepctx.cli.views.topdown import rows
from deepctx.profiles.tree import Frame, ViewNode, from_doc, nonzero_metrics, pick_metric

# torch_ops, through cudaLaunchKernel: x * 2 (LINE_MUL) 1000, sum 50, a / 64 20, randn 1. Besides: 20 a @ a
# (cuLaunchKernelEx), 50 copies and 50 stream syncs (LINE_ITEM), 2 device syncs, 4 cudaMalloc, 3 cuMemAlloc
# and 1 cuMemFree.
LAUNCHES = 1000 + 50 + 20 + 1
CALLS = LAUNCHES + 20 + 50 + 50 + 2 + 4 + 3 + 1


def test_totals_of_the_torch_fixture(torch_doc) -> None:
    root = from_doc(torch_doc)
    expected = recorded.totals(torch_doc)
    assert root.total == expected
    assert expected["calls"] == CALLS == 1201 and expected["gpu_time_ns"] == 0 and expected["cpu_samples"] > 0
    assert pick_metric(root) == "cpu_samples"
    assert nonzero_metrics(root) == ["cpu_samples", "calls", "api_time_ns", "bytes", "sync_wait_ns"]
    threads = {c.tid: c.total["cpu_samples"] for c in root.children}
    assert threads == recorded.thread_samples(torch_doc) and torch_doc["pid"] in threads  # main thread: tid = pid
    assert sum(threads.values()) == expected["cpu_samples"]


def test_flat_view_counts_the_elementwise_launches(torch_doc) -> None:
    _, kernel = recorded.elementwise(torch_doc)
    top = sorted_rows(flat(from_doc(torch_doc)), "calls")
    fifty = sorted(((n["kind"], n["name"], 50) for _, n in recorded.nodes(torch_doc) if n["metrics"]["calls"] == 50),
                   key=lambda r: r[1])  # ties in name order
    assert [k for k, _, _ in fifty] == ["memcpy", "kernel", "sync"]  # the copy, sum's kernel, the stream sync
    assert [(r.frame.kind, r.frame.name, r.self["calls"]) for r in top[:4]] == [
        ("kernel", kernel["name"], recorded.N_MUL), *fifty]
    launch = next(r for r in top if r.frame.kind == "api" and r.frame.name == "cudaLaunchKernel")
    launches = [n for _, n in recorded.nodes(torch_doc) if n["kind"] == "api" and n["name"] == "cudaLaunchKernel"]
    assert launch.self["calls"] == 0 and launch.nodes == len(launches) == 4
    assert launch.total["calls"] == sum(recorded.inclusive(n, "calls") for n in launches) == LAUNCHES
    assert top[0].total["api_time_ns"] == kernel["metrics"]["api_time_ns"] > 0
    assert sum(r.self["calls"] for r in top) == recorded.metric_total(torch_doc, "calls")  # each call once
    assert not any(r.frame.kind == "thread" for r in top)


def test_top_down_rows_follow_the_hot_path(torch_doc) -> None:
    anc, kernel = recorded.elementwise(torch_doc)
    grand = recorded.metric_total(torch_doc, "calls")
    assert all(2 * recorded.inclusive(n, "calls") >= grand for n in anc)  # the kernel's path holds over half
    root = from_doc(torch_doc)
    visible, hidden = rows(root, "calls", min_percent=50)
    assert [(r.node.frame.kind, r.node.frame.name, r.node.frame.line) for r in visible] == [
        (n["kind"], n["name"], n["line"]) for n in [*anc, kernel]]
    names = [r.node.frame.name for r in visible]
    assert names[0] == "python3" and names[-2:] == ["cudaLaunchKernel", kernel["name"]]
    assert ("multiply", line_of(recorded.TORCH_TARGET, "LINE_MUL")) in [
        (r.node.frame.name, r.node.frame.line) for r in visible]
    assert visible[-1].node.total["calls"] == recorded.N_MUL and visible[-1].depth == len(visible) - 1
    assert hidden == recorded.node_count(torch_doc) - 1 - len(visible)  # every other node is hidden, none lost


def as_tree(node: ViewNode) -> dict:
    tree = {(c.frame.kind, c.frame.name, c.frame.file, c.frame.module): (c.total, as_tree(c)) for c in node.children}
    assert len(tree) == len(node.children)  # lines of one function merged
    return tree


def test_bottom_up_roots_are_where_values_were_measured(torch_doc) -> None:
    anc, kernel = recorded.elementwise(torch_doc)
    bu = bottom_up(from_doc(torch_doc))
    roots = {(c.frame.kind, c.frame.name): c for c in bu.children}
    k = roots[("kernel", kernel["name"])]
    assert k.total["calls"] == recorded.N_MUL and bu.total == recorded.totals(torch_doc)
    assert [c.frame.name for c in k.children] == ["cudaLaunchKernel"]
    chain = []
    node = k
    while node.children:
        assert len(node.children) == 1  # one call path
        node = node.children[0]
        chain.append(node.frame.name)
    assert chain == [a["name"] for a in reversed(anc)]  # callers outwards, lines merged
    assert chain[-1] == "python3" and node.self["calls"] == recorded.N_MUL  # outermost caller: the thread
    # Every caller chain, split as counted from the JSON; the two device syncs (LINE_SYNC, and main's) share
    # their path up to torch.cuda.synchronize and split there.
    assert as_tree(bu) == recorded.bottom_up_tree(torch_doc)
    sync = roots[("sync", "device")]
    while len(sync.children) == 1:
        sync = sync.children[0]
    assert sync.frame.name == "synchronize" and sorted(
        (c.frame.name, c.total["calls"]) for c in sync.children) == [("main", 1), ("wait_for_gpu", 1)]


def test_bottom_up_of_every_fixture_matches_the_json(torch_doc, jax_doc, triton_doc) -> None:
    for doc in (torch_doc, jax_doc, triton_doc):
        bu = bottom_up(from_doc(doc))
        assert bu.total == recorded.totals(doc) and as_tree(bu) == recorded.bottom_up_tree(doc)


def test_bottom_up_merges_the_lines_of_a_caller() -> None:
    b = Builder()
    t = thread("main", 1)
    k = frame("kernel", "k")
    b.add([t, py("step", "/a.py", 1), k], calls=3)
    b.add([t, py("step", "/a.py", 2), k], calls=4)
    b.add([t, py("other", "/a.py", 9), k], calls=5)
    bu = bottom_up(from_doc(b.doc))
    assert as_tree(bu) == recorded.bottom_up_tree(b.doc)
    (kernel,) = bu.children
    assert kernel.total["calls"] == 12
    assert sorted((c.frame.name, c.frame.line, c.total["calls"]) for c in kernel.children) == [
        ("other", None, 5), ("step", None, 7)]


def test_bottom_up_with_focus_lists_the_callers(torch_doc) -> None:
    bu = bottom_up(from_doc(torch_doc), focus="^cudaLaunchKernel$")
    matches = recorded.outermost(torch_doc, "^cudaLaunchKernel$")
    expected: dict = {}
    for _, n in matches:  # first occurrence in preorder decides the order
        key = recorded.function(n)
        expected[key] = expected.get(key, 0) + recorded.inclusive(n, "calls")
    assert [(c.frame.kind, c.total["calls"]) for c in bu.children] == [(f[0], v) for f, v in expected.items()]
    assert sorted((c.frame.kind, c.total["calls"]) for c in bu.children) == [("api", LAUNCHES), ("native", 0)]
    api = next(c for c in bu.children if c.frame.kind == "api")
    callers: dict = {}
    for anc, n in matches:
        if n["kind"] == "api":
            key = recorded.function(anc[-1])
            callers[key] = callers.get(key, 0) + recorded.inclusive(n, "calls")
    assert {(c.frame.kind, c.frame.name, c.frame.file, c.frame.module): c.total["calls"] for c in api.children} == callers
    assert sorted(callers.values()) == [1, 20, 50, 1000]  # randn, a / 64, sum, x * 2


def test_focus_tree_merges_all_occurrences(torch_doc) -> None:
    f = focus_tree(from_doc(torch_doc), "cudaStreamSynchronize")
    expected = [(n["kind"], recorded.inclusive(n, "calls"), recorded.inclusive(n, "sync_wait_ns"))
                for _, n in recorded.outermost(torch_doc, "cudaStreamSynchronize")]
    assert [(c.frame.kind, c.total["calls"], c.total["sync_wait_ns"]) for c in f.children] == expected
    assert [(k, calls) for k, calls, _ in expected] == [("api", 50)] and expected[0][2] > 0  # .item() x 50
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
