"""Python-leaf self time in the flat view (issue 35.5): a Python function keeps the samples it was the innermost
Python frame of, whatever unnamed native code ran below it; the native metric is still there."""

from __future__ import annotations

import json
import os
import tempfile

from synth import Builder, nat, py, thread

from deepctx.cli.main import main
from deepctx.cli.views.flat import flat
from deepctx.cli.views.python_self import default_self_mode, python_leaf_self
from deepctx.profiles.tree import ViewNode, from_doc

DOC = "/srv/docutils/parsers/rst/states.py"


def inliner_profile() -> ViewNode:
    """Inliner.parse: 64 samples in its own bytecode, 9 in an unnamed libc address it called (73 as the Python
    leaf); a native-only thread with 5 samples in libc; 20 in a regex match under Inliner.parse's caller."""
    b = Builder()
    main = [thread("python3", 4242), py("<module>", "/srv/run.py", 3), py("Body.text", DOC, 100)]
    b.add(main + [py("Inliner.parse", DOC, 640)], cpu_samples=40)
    b.add(main + [py("Inliner.parse", DOC, 652)], cpu_samples=24)
    b.add(main + [py("Inliner.parse", DOC, 652), nat("libc.so.6+0x9d2f0", "libc.so.6")], cpu_samples=6)
    b.add(main + [py("Inliner.parse", DOC, 652), nat("_PyEval_EvalFrameDefault", "libpython3.12.so"),
                  nat("libc.so.6+0x9d2f0", "libc.so.6")], cpu_samples=3)
    b.add(main + [nat("sre_match", "libpython3.12.so")], cpu_samples=20)
    b.add([thread("worker", 4243), nat("start_thread", "libc.so.6"), nat("libc.so.6+0x1200", "libc.so.6")],
          cpu_samples=5)
    return from_doc(b.doc)


def selfs(root: ViewNode) -> dict[str, tuple[int, int]]:
    return {r.frame.name: (r.self["cpu_samples"], r.total["cpu_samples"]) for r in flat(root)}


def test_python_leaf_self_gives_the_python_function_its_native_leaves() -> None:
    root = inliner_profile()
    assert default_self_mode(root) == "python"
    native, python = selfs(root), selfs(python_leaf_self(root))
    # native: the unnamed libc address holds 9 of Inliner.parse's 73; Python leaf: all 73 are its own
    assert native["Inliner.parse"] == (64, 73) and native["libc.so.6+0x9d2f0"] == (9, 9)
    assert python["Inliner.parse"] == (73, 73)
    assert python["libc.so.6+0x9d2f0"] == (0, 9) and python["_PyEval_EvalFrameDefault"] == (0, 3)
    assert python["Body.text"] == (20, 93) and native["sre_match"] == (20, 20) and python["sre_match"] == (0, 20)
    # a thread with no Python frame keeps its native self time
    assert python["libc.so.6+0x1200"] == native["libc.so.6+0x1200"] == (5, 5)
    assert sum(s for s, _ in python.values()) == sum(s for s, _ in native.values()) == 98
    assert root.total == python_leaf_self(root).total  # totals are unchanged, and the input is not modified
    assert selfs(root) == native


def test_native_targets_default_to_native_self() -> None:
    b = Builder(command="./server")
    b.add([thread("server", 1), nat("main", "server"), nat("work", "server")], cpu_samples=7)
    assert default_self_mode(from_doc(b.doc)) == "native"


def flat_rows(capsys, path: str, *args: str) -> dict[str, int]:
    assert main(["report", path, "--view", "flat", "--color", "never", "--width", "200", *args]) == 0
    out = capsys.readouterr().out
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 4 and cells[0].endswith("%") and cells[1].isdigit():
            rows[cells[3]] = int(cells[1])
    return {"header": out, **rows}


def test_report_flat_defaults_to_python_leaf_self_and_keeps_native(capsys) -> None:
    b = Builder()
    main_path = [thread("python3", 4242), py("<module>", "/srv/run.py", 3), py("Inliner.parse", DOC, 652)]
    b.add(main_path, cpu_samples=64)
    b.add(main_path + [nat("libc.so.6+0x9d2f0", "libc.so.6")], cpu_samples=9)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.json")
        with open(path, "w") as f:
            json.dump(b.doc, f)
        python = flat_rows(capsys, path, "--columns", "cpu_samples")
        native = flat_rows(capsys, path, "--columns", "cpu_samples", "--self-time", "native")
    assert "flat (functions, self: innermost Python frame)" in str(python["header"])
    assert "flat (functions, self: innermost frame)" in str(native["header"])
    assert (python["Inliner.parse"], python.get("libc.so.6+0x9d2f0")) == (73, None)  # rows with no self are hidden
    assert (native["Inliner.parse"], native["libc.so.6+0x9d2f0"]) == (64, 9)
