"""Discovery, thread states, layouts and symbolization on live interpreters, without BPF: the test
oracle userwalk.py walks frames the way the BPF walker does, through /proc/<pid>/mem of a child
process (readable by its parent, no root needed)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import userwalk
from harness import marked_lines
from targets.python.pythons import INTERPRETERS, Interpreter

from deepctx.host.procfs import AddressSpace, ProcessMemory, read_maps
from deepctx.host.python.code import CodeReader
from deepctx.host.python.discovery import Interpreter as PyInterp
from deepctx.host.python.discovery import find_interpreter
from deepctx.host.python.stacks import symbolize_stack
from deepctx.host.python.threads import ThreadMapper

TARGETS = Path(__file__).resolve().parents[2] / "targets" / "python"


class Child:
    def __init__(self, interp: Interpreter, script: str) -> None:
        if interp.path is None:
            pytest.skip(f"{interp.id} is not installed")
        env = dict(os.environ, DEEPCTX_TARGET_SECONDS="60")
        self.proc = subprocess.Popen([str(interp.path), str(TARGETS / script)], stdout=subprocess.PIPE, text=True,
                                     env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("ready"), line
        self.info = json.loads(line.split(None, 2)[2])
        self.pid = self.proc.pid
        self.mem = ProcessMemory(self.pid)
        self.interp = find_interpreter(self.pid, AddressSpace(read_maps(self.pid)), self.mem)
        self.codes = CodeReader(self.mem, self.interp)

    def stacks(self) -> dict[int, list]:
        """host tid -> symbolized frames (outermost first)."""
        out = {}
        for tid, ts in ThreadMapper(self.mem, self.interp).snapshot().items():
            out[tid] = symbolize_stack(self.codes, userwalk.walk(self.mem, self.interp, ts.tstate))
        return out

    def close(self) -> None:
        self.mem.close()
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def child(request: pytest.FixtureRequest) -> Iterator[Child]:
    interp, script = request.param
    c = Child(interp, script)
    yield c
    c.close()


def params(script: str) -> list:
    return [pytest.param((i, script), id=i.id) for i in INTERPRETERS]


def settle(child: Child, ok) -> dict[int, list]:  # noqa: ANN001
    """Stacks read while the target runs may catch a frame mid-call: read again until `ok` holds."""
    last: dict[int, list] = {}
    for _ in range(200):
        last = child.stacks()
        if ok(last):
            return last
    raise AssertionError(f"no consistent stacks: { {t: [f.frame.name for f in s] for t, s in last.items()} }")


@pytest.mark.parametrize("child", params("callpath.py"), indirect=True)
def test_interpreter_described(child: Child) -> None:
    interp: PyInterp = child.interp
    # Py_Version on 3.11+, the PY_VERSION string in .rodata on 3.10
    assert interp.version == tuple(child.info["version"])
    assert os.path.basename(interp.path).startswith(("libpython", "python"))
    assert os.path.basename(interp.path) in interp.modules


@pytest.mark.parametrize("child", params("callpath.py"), indirect=True)
def test_main_thread_call_path(child: Child) -> None:
    script = "callpath.py"
    main = child.info["tid"]

    def ok(stacks: dict[int, list]) -> bool:
        return [f.frame.name for f in stacks.get(main, [])][:4] == ["<module>", "top", "mid", "leaf"]

    frames = [f.frame for f in settle(child, ok)[main]]
    module, top, mid, leaf = frames[:4]
    assert all(f.kind == "python" and f.file == str(TARGETS / script) and f.module == "callpath" for f in frames[:4])
    assert top.line in marked_lines(TARGETS / script, "call-mid")
    assert mid.line in marked_lines(TARGETS / script, "call-leaf")
    assert leaf.line in marked_lines(TARGETS / script, "leaf-loop")
    assert module.line == len((TARGETS / script).read_text().splitlines())  # top() is the last line


@pytest.mark.parametrize("child", params("qualnames.py"), indirect=True)
def test_qualified_names_and_entry_frames(child: Child) -> None:
    want = child.info["threads"]

    def ok(stacks: dict[int, list]) -> bool:
        return all(name in [f.frame.name for f in stacks.get(tid, [])] for name, tid in want.items())

    stacks = settle(child, ok)
    for name, tid in want.items():
        frames = stacks[tid]
        names = [f.frame.name for f in frames]
        assert names[:3] == ["Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"], names
        assert frames[0].is_entry  # the thread's first frame is called from C
        if child.interp.version < (3, 11):
            assert all(f.is_entry for f in frames)  # one eval activation per frame
        # Thread.run calls its target through C (PyObject_Call): a new eval activation on 3.10/3.11
        if child.interp.version < (3, 12):
            assert frames[names.index(name)].is_entry or name == "outer.<locals>.inner"


@pytest.mark.parametrize("child", params("recursion.py"), indirect=True)
def test_truncation_keeps_innermost_frames(child: Child) -> None:
    main = child.info["tid"]

    def ok(stacks: dict[int, list]) -> bool:
        return "bottom" in [f.frame.name for f in stacks.get(main, [])]

    frames = settle(child, ok)[main]
    assert frames[0].frame.name == "[truncated]"
    names = [f.frame.name for f in frames[1:]]
    assert set(names) <= {"recurse", "bottom", "running"} and len(names) in (127, 128)
    assert names[-2:] == ["bottom", "running"] or names[-1] == "bottom"


@pytest.mark.parametrize("child", params("threads.py"), indirect=True)
def test_thread_states_map_to_native_threads(child: Child) -> None:
    snap = ThreadMapper(child.mem, child.interp).snapshot()
    assert set(child.info["threads"].values()) | {child.pid} <= set(snap)
    for ts in snap.values():
        assert ts.tstate and ts.ident


def test_not_a_python_process() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with ProcessMemory(proc.pid) as mem:
            with pytest.raises(ValueError, match="is not a Python process"):
                find_interpreter(proc.pid, AddressSpace(read_maps(proc.pid)), mem)
    finally:
        proc.kill()
        proc.wait()



@pytest.mark.parametrize("version", ["2.7", "3.6", "3.9"])
def test_old_interpreters_are_refused_by_version(version: str) -> None:
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(root.glob(f"{version}.*/bin/python"))
    if not found:
        pytest.skip(f"no Python {version} installed")
    proc = subprocess.Popen([str(found[-1]), "-c", "import sys, time; print('ready'); sys.stdout.flush(); time.sleep(30)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        with ProcessMemory(proc.pid) as mem:
            with pytest.raises(ValueError, match=rf"^Python {version} is not supported \(supported: 3\.10, "):
                find_interpreter(proc.pid, AddressSpace(read_maps(proc.pid)), mem)
    finally:
        proc.kill()
        proc.wait()
