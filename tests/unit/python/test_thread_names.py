"""Python thread names read from live interpreters (3.10-3.13, issue 35.3): every thread `threading` knows, by its
host tid, with the name it was given; no BPF, the parent reads its child's memory."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from targets.python.pythons import INTERPRETERS, Interpreter

from deepctx.host.procfs import AddressSpace, ProcessMemory, read_maps
from deepctx.host.python.discovery import find_interpreter
from deepctx.host.python.thread_names import read_thread_names
from deepctx.host.python.threads import ThreadMapper

TARGET = Path(__file__).resolve().parents[2] / "targets" / "python" / "named_threads.py"
NAMED = [i for i in INTERPRETERS if (3, 10) <= i.version <= (3, 13)]


class Target:
    def __init__(self, interp: Interpreter, *args: str) -> None:
        if interp.path is None:
            pytest.skip(f"{interp.id} is not installed")
        env = dict(os.environ, DEEPCTX_TARGET_SECONDS="60")
        self.proc = subprocess.Popen([str(interp.path), str(TARGET), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("ready"), line
        self.tids: dict[str, int] = json.loads(line.split(None, 2)[2])["threads"]
        self.mem = ProcessMemory(self.proc.pid)
        self.interp = find_interpreter(self.proc.pid, AddressSpace(read_maps(self.proc.pid)), self.mem)

    def names(self) -> dict[int, str]:
        return read_thread_names(self.mem, self.interp, ThreadMapper(self.mem, self.interp).snapshot())

    def close(self) -> None:
        self.mem.close()
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    t = Target(*request.param)
    yield t
    t.close()


@pytest.mark.parametrize("target", [pytest.param((i,), id=i.id) for i in NAMED], indirect=True)
def test_every_thread_has_its_python_name(target: Target) -> None:
    # the target's tids are as its pid namespace sees them: the test runs in the same one
    expected = {tid: name for name, tid in target.tids.items()}
    assert sorted(expected.values()) == ["MainThread", "données-ü", "pool_0", "work_0", "work_1"]
    assert target.names() == expected


@pytest.mark.parametrize("target", [pytest.param((i, "--renamed-main"), id=i.id) for i in NAMED], indirect=True)
def test_a_renamed_main_thread(target: Target) -> None:
    names = target.names()
    assert names[target.proc.pid] == "coordinator" and len(names) == 5


def test_thread_nodes_show_the_python_name_beside_the_os_name_and_role() -> None:
    from deepctx.daemon.callpaths import CallPathResolver
    from deepctx.host.frames import Frame, thread_frame
    from deepctx.host.procfs import AddressSpace

    assert thread_frame(7, "python3", 7, "MainThread") == Frame("thread", "python3 (MainThread)", tid=7)
    assert thread_frame(7, "python3", 7, "coordinator") == Frame("thread", "python3 (coordinator, MainThread)", tid=7)
    assert thread_frame(8, "python3", 7, "work_0").name == "python3 (work_0)"
    assert thread_frame(8, "work_0", 7, "work_0").name == "work_0"  # an OS name set from Python: said once
    assert thread_frame(9, "pt_autograd_0", 7).name == "pt_autograd_0 (autograd device 0)"
    r = CallPathResolver(7, AddressSpace([]), lambda sid: ([], False), None, {7: "python3", 8: "python3"},  # type: ignore[arg-type]
                         python_names={8: "work_0"})
    assert (r.thread(7), r.thread(8)) == (Frame("thread", "python3 (MainThread)", tid=7),
                                          Frame("thread", "python3 (work_0)", tid=8))


class FakeThreadTable(dict):
    """py_threads as the family writes it (no BPF here)."""

    class Leaf:
        from_buffer_copy = staticmethod(bytes)

    def __setitem__(self, key: ctypes.c_uint32, value: bytes) -> None:
        super().__setitem__(key.value, value)


@pytest.mark.parametrize("interp", [pytest.param(i, id=i.id) for i in NAMED])
def test_the_family_reads_names_on_thread_map_changes_and_none_without_threading(interp: Interpreter) -> None:
    from deepctx.host.procfs import process_info
    from deepctx.probes.family import Target as FamilyTarget
    from deepctx.probes.python_stack import NAME_RETRIES, PythonStacks

    if interp.path is None:
        pytest.skip(f"{interp.id} is not installed")
    code = "import sys; print('ready', 'threading' in sys.modules, flush=True); sys.stdin.readline()"
    proc = subprocess.Popen([str(interp.path), "-I", "-S", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready False\n"  # no threading module
        target = FamilyTarget(proc.pid, process_info(proc.pid), AddressSpace(read_maps(proc.pid)))
        fam = PythonStacks()
        fam.prepare(target)
        bpf = {b"py_threads": FakeThreadTable(), b"py_procs": FakeThreadTable()}
        state = fam._procs[proc.pid]
        for _ in range(NAME_RETRIES + 2):  # the first write of the map, then refreshes that change nothing
            fam._refresh(bpf, proc.pid, state)
        # read at the change, and again while the main thread had no name, NAME_RETRIES reads in all
        assert fam.thread_names(proc.pid) == {} and fam.name_reads == NAME_RETRIES
        assert list(bpf[b"py_threads"]) == [proc.pid] and fam.refreshes == NAME_RETRIES + 2
    finally:
        proc.kill()
        proc.wait()
