"""Folding for the views (profiles/fold.py, profiles/tree.py: from_doc): start-up frames above the outermost
Python frame, so stacks whose native unwinding stopped short merge with full ones, and framework plumbing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import recorded
from synth import Builder, frame, nat, py, thread

from deepctx.cli.formats.html_payload import DISPATCH, LIFT, PLUMBING, STARTUP, profile_payload
from deepctx.profiles.fold import SHOW_ALL, Fold, is_plumbing
from deepctx.profiles.tree import ViewNode, from_doc

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "profiles"
MODULE = "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py"
TRAIN = "/srv/train.py"


def startup(*names: str) -> list[dict[str, Any]]:
    return [nat(n, "python3.12") for n in names]


def split_profile() -> dict[str, Any]:
    """One thread's Python path recorded three ways: with every native caller, with the unwinding cut short
    under `[unwinding lost the callers]`, and with no native caller at all; plus a start-up sample with no
    Python frame, a plumbing frame's own sample, and a native thread."""
    b = Builder()
    t = thread("MainThread", 11)
    full = [t, *startup("_start", "__libc_start_main", "Py_RunMain", "pymain_run_python")]
    lost = [t, nat("[unwinding lost the callers]", "")]
    layer = [py("<module>", TRAIN, 30), py("step", TRAIN, 12), py("Module._wrapped_call_impl", MODULE, 1775),
             py("Module._call_impl", MODULE, 1786), py("Linear.forward", "/srv/model.py", 8)]
    b.add([*full, *layer, nat("at::mm", "libtorch.so")], cpu_samples=5, gpu_time_ns=1000)
    b.add([*lost, *layer, nat("at::mm", "libtorch.so")], cpu_samples=3, gpu_time_ns=700)
    b.add([t, *layer], cpu_samples=2)
    b.add([*full, *layer[:3]], cpu_samples=1)  # in Module._wrapped_call_impl itself
    b.add([*full[:3], nat("Py_FinalizeEx", "python3.12")], cpu_samples=4)  # start-up, no Python below
    b.add([thread("cuda-worker", 12), nat("start_thread", "libc.so.6"), nat("worker", "libcuda.so")], cpu_samples=6)
    return b.doc


def shape(node: ViewNode, metric: str = "cpu_samples") -> list[Any]:
    """Each child as (name, line, total), with its children, by name: the tree's exact form."""
    kids = sorted(node.children, key=lambda c: (c.frame.name, c.frame.line or 0))
    return [(c.frame.name, c.frame.line, c.total[metric], shape(c, metric)) for c in kids]


def count(root: ViewNode) -> int:
    return sum(1 for _ in root.walk())


def test_stacks_that_lost_their_native_callers_merge_with_full_ones() -> None:
    doc = split_profile()
    raw = from_doc(doc)  # as recorded: three <module> nodes under the thread's chains
    assert count(raw) == 1 + 2 + (4 + 5 + 1) + 1 + (1 + 5 + 1) + 5 + 2 == 28
    folded = from_doc(doc, Fold(plumbing=False))
    main, worker = sorted(folded.children, key=lambda t: t.tid or 0)
    assert shape(main) == [
        ("<module>", 30, 11, [("step", 12, 11, [("Module._wrapped_call_impl", 1775, 11, [
            ("Module._call_impl", 1786, 10, [("Linear.forward", 8, 10, [("at::mm", None, 8, [])])])])])]),
        # start-up frames with a sample of their own and no Python below keep their place
        ("_start", None, 4, [("__libc_start_main", None, 4, [("Py_FinalizeEx", None, 4, [])])]),
    ]
    [module] = [c for c in main.children if c.frame.name == "<module>"]
    assert module.total["gpu_time_ns"] == 1700
    assert shape(worker) == [("start_thread", None, 6, [("worker", None, 6, [])])]  # no Python: kept whole
    assert count(folded) == 1 + 2 + 6 + 3 + 2 == 14
    assert folded.total == raw.total


def test_plumbing_frames_fold_into_their_callers() -> None:
    folded = from_doc(split_profile(), Fold())  # the views' default: start-up and plumbing folded
    [main] = [t for t in folded.children if t.tid == 11]
    # step's own sample in Module._wrapped_call_impl is now step's
    assert shape(main)[0] == ("<module>", 30, 11, [("step", 12, 11, [
        ("Linear.forward", 8, 10, [("at::mm", None, 8, [])])])])
    [step] = [c.children[0] for c in main.children if c.frame.name == "<module>"]
    assert (step.self["cpu_samples"], step.total["cpu_samples"]) == (1, 11)
    assert count(folded) == 12
    assert folded.extra["folded"] == {"startup": 2, "plumbing": 6, "dispatch": 0}  # the full and the cut stack; 2 per path
    shown = from_doc(split_profile(), Fold(startup=False))
    assert count(shown) == 28 - 2 * 3  # each of the three recorded paths loses its two plumbing frames


def test_the_h200_resnet_profile_has_one_module_frame() -> None:
    """The recorded ResNet-50 capture holds `<module> resnet.py:21` under `__libc_start_main` and directly
    under its thread (issue #34.9): folded, one node with both GPU times."""
    doc = recorded.read(FIXTURES / "h200_resnet50_trace.json.xz")
    raw, folded = from_doc(doc, SHOW_ALL), from_doc(doc, Fold(plumbing=False))
    main = next(t for t in raw.children if t.frame.name == "python3" and any(
        c.frame.name == "__libc_start_main" for c in t.children))
    [libc] = [c for c in main.children if c.frame.name == "__libc_start_main"]
    assert [(c.frame.name, c.frame.line, c.total["gpu_time_ns"]) for c in main.children] == [
        ("__libc_start_main", None, 40840005), ("<module>", 21, 9216314), ("<module>", 22, 0)]
    assert libc.self["cpu_samples"] == 0 and libc.total["cpu_samples"] == 4
    [fmain] = [t for t in folded.children if t.tid == main.tid]
    assert [(c.frame.name, c.frame.line, c.total["gpu_time_ns"], c.total["cpu_samples"]) for c in fmain.children] == [
        ("<module>", 21, 50056319, 4), ("<module>", 22, 0, 0)]
    assert (count(raw), count(folded), count(from_doc(doc, Fold()))) == (13519, 13339, 13221)
    assert "folded" not in raw.extra and folded.extra["folded"] == {"startup": 1, "plumbing": 0, "dispatch": 0}
    assert folded.total == raw.total


def test_plumbing_list_matches_qualified_and_310_names() -> None:
    assert is_plumbing("python", "Module._call_impl", MODULE)
    assert is_plumbing("python", "_call_impl", MODULE)  # 3.10 names code objects without their class
    assert not is_plumbing("python", "Module._call_impl", "/srv/my_module.py")
    assert not is_plumbing("native", "Module._call_impl", MODULE)
    assert not is_plumbing("python", "Linear.forward", MODULE)


def test_html_payload_flags_what_its_toggles_fold() -> None:
    doc = split_profile()
    root = from_doc(doc)
    p = profile_payload(doc, root, "cpu_samples", {}, Fold(startup=True, plumbing=False))
    names = [p["strings"][i] for i in p["nodes"]["name"]]
    flags: dict[str, int] = {}
    for name, f in zip(names, p["nodes"]["flags"], strict=True):
        flags.setdefault(name, f)  # the first node of each name, in preorder: the full stack's
    assert flags["_start"] == flags["Py_RunMain"] == flags["[unwinding lost the callers]"] == STARTUP
    assert flags["<module>"] == LIFT and flags["step"] == 0
    assert flags["Module._call_impl"] == PLUMBING and flags["Linear.forward"] == 0
    assert flags["start_thread"] == STARTUP  # a native thread's frames: the page keeps them, nothing is lifted
    assert sum(1 for f in p["nodes"]["flags"] if f & LIFT) == 2  # <module> below the full and the cut stack
    assert p["fold"] == {"startup": True, "plumbing": False, "dispatch": True}


# A capture of the operator miniature (tests/integration/test_operators.py's target, recorded on the CI VM
# in exact mode): matmul -> mm, sum.dim_IntList, addmm and mul.Tensor launching through the real libcudart.
OPS = FIXTURES / "ops_miniature.json.xz"


def test_dispatch_folding_leaves_the_line_its_operators_and_launches() -> None:
    doc = recorded.read(OPS)
    raw, folded = from_doc(doc, SHOW_ALL), from_doc(doc, Fold())

    def below_lines(root: ViewNode) -> dict[int, list[list[str]]]:
        out: dict[int, list[list[str]]] = {}
        for n in root.walk():
            if n.frame.kind == "python" and n.frame.file and n.frame.file.endswith("ops_calls.py") and n.frame.name == "step":
                paths, stack = [], [(c, [c]) for c in n.children]
                while stack:
                    node, path = stack.pop()
                    if node.frame.kind == "kernel":
                        paths.append([f"{p.frame.kind}:{p.frame.name}" for p in path])
                    stack.extend((c, [*path, c]) for c in node.children)
                out.setdefault(n.frame.line, []).extend(sorted(paths))
        return out

    got = below_lines(folded)
    assert sorted(got.values()) == [
        [["op:aten::addmm", "api:cudaLaunchKernel", "kernel:gemm_kernel"]],
        [["op:aten::matmul", "op:aten::mm", "api:cudaLaunchKernel", "kernel:gemm_kernel"]],
        [["op:aten::mul.Tensor", "api:cudaLaunchKernel", "kernel:mul_kernel"]],
        [["op:aten::sum.dim_IntList", "api:cudaLaunchKernel", "kernel:reduce_kernel"]],
    ]
    assert all(len(p) > 6 for paths in below_lines(raw).values() for p in paths)  # the natives, recorded
    assert folded.total == raw.total  # folded frames' values went to their callers
    assert from_doc(doc, Fold(dispatch=False)).extra["folded"]["dispatch"] == 0
    assert folded.extra["folded"]["dispatch"] > 0


def test_dispatch_folding_keeps_paths_without_operators() -> None:
    """Native frames fold only where an aten operator stands below them or above them; a hand-off label
    (an op node that is not an operator) folds nothing."""
    b = Builder()
    t = thread("MainThread", 11)
    line = py("step", TRAIN, 12)
    b.add([t, line, nat("THPVariable_mm", "libtorch_python.so"), frame("op", "aten::mm", module="libtorch_cpu.so"), nat("at::_ops::mm::call", "libtorch_cpu.so"),
          nat("cublasSgemm_v2", "libcublas.so")], cpu_samples=3)
    b.add([t, line, nat("my_extension_op", "libmine.so"), nat("helper", "libmine.so")], cpu_samples=2)
    b.add([t, line, nat("handoff_run", "libpool.so"), frame("op", "[pool]"), nat("run_task", "libpool.so")], cpu_samples=1)
    root = from_doc(b.doc, Fold())
    step = next(n for n in root.walk() if n.frame.name == "step")
    kids = {c.frame.name: c for c in step.children}
    assert sorted(kids) == ["aten::mm", "handoff_run", "my_extension_op"]
    assert kids["aten::mm"].self["cpu_samples"] == 3 and not kids["aten::mm"].children  # cuBLAS folded into it
    assert [c.frame.name for c in kids["my_extension_op"].children] == ["helper"]
    assert [c.frame.name for c in kids["handoff_run"].children] == ["[pool]"]
    assert root.extra["folded"]["dispatch"] == 3  # THPVariable_mm, the entry, cublasSgemm_v2


def test_html_payload_flags_dispatch_frames() -> None:
    doc = recorded.read(OPS)
    p = profile_payload(doc, from_doc(doc), "calls", {})
    names = [p["strings"][i] for i in p["nodes"]["name"]]
    flagged = {n for n, f in zip(names, p["nodes"]["flags"], strict=True) if f & DISPATCH}
    assert {"ops_matmul", "at::_ops::mm::call(long)", "at::_ops::mm::redispatch(int, long)",
            "at::native::mm_cuda(long)"} <= flagged
    assert not flagged & {"aten::mm", "aten::matmul", "step", "cudaLaunchKernel", "gemm_kernel", "_start"}
    assert p["fold"] == {"startup": True, "plumbing": True, "dispatch": True}
