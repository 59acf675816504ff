"""The Python family's lifecycle against a live interpreter, with the BPF maps replaced by
dictionaries: what attach() and poll() write, and that frames are named while the process lives and
still named after it exited."""

from __future__ import annotations

import ctypes as ct
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import userwalk
from targets.python.pythons import INTERPRETERS, Interpreter

from deepctx.host.procfs import AddressSpace, ProcessMemory, process_info, read_maps, thread_ids
from deepctx.host.python.code import CodeReader
from deepctx.host.python.stacks import symbolize_stack
from deepctx.host.python.threads import GLIBC_PTHREAD_TID, ThreadMapper, main_interpreter
from deepctx.probes import python_stack as ps
from deepctx.probes.family import Target

TARGETS = Path(__file__).resolve().parents[2] / "targets" / "python"


class FakeTable:
    """A BPF map as bcc presents it: ctypes keys and leaves."""

    def __init__(self, leaf: Any, percpu: int = 0) -> None:
        self.Leaf = leaf
        self.data: dict[int, Any] = {}
        self.queue: list[Any] = []
        self.percpu = percpu

    def __getitem__(self, key: Any) -> Any:
        if self.percpu:
            return [self.data.get(key.value, 0)] * self.percpu
        return self.data[key.value]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.data[key.value] = value

    def __delitem__(self, key: Any) -> None:
        del self.data[key.value]

    def items(self) -> list[tuple[Any, Any]]:
        return [(ct.c_uint32(k), v) for k, v in self.data.items()]

    def items_lookup_and_delete_batch(self) -> list[tuple[int, int]]:
        # bcc's batch operations hand scalars over as ints (elements of ctypes arrays), structs as they are
        out = [(k, v.value if isinstance(v, ct._SimpleCData) else v) for k, v in self.data.items()]
        self.data.clear()
        return out

    def keys(self) -> list[Any]:
        return [ct.c_uint64(k) for k in self.data]

    def pop(self) -> Any:
        if not self.queue:
            raise KeyError("empty")
        return self.queue.pop(0)


class FakeBPF(dict):
    def __init__(self, max_depth: int) -> None:
        super().__init__({  # keyed by bytes, as bcc wants its table names
            b"py_procs": FakeTable(ps.PyProc), b"py_proc_slots": FakeTable(ct.c_uint32),
            b"py_threads": FakeTable(ps.PyThread),
            b"py_misses": FakeTable(ct.c_uint32), b"py_found": FakeTable(ps.PyFoundThread), b"py_stacks": FakeTable(ps.py_stack_type(max_depth)),
            b"py_new_stacks": FakeTable(ps.PyNewStack), b"py_stats": FakeTable(ct.c_uint64, percpu=2),
        })


@pytest.fixture(params=INTERPRETERS, ids=lambda i: i.id)
def target(request: pytest.FixtureRequest) -> Iterator[tuple[subprocess.Popen, Target, dict]]:
    interp: Interpreter = request.param
    if interp.path is None:
        pytest.skip(f"{interp.id} is not installed")
    proc = subprocess.Popen([str(interp.path), str(TARGETS / "callpath.py")], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, DEEPCTX_TARGET_SECONDS="60"))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    info = json.loads(line.split(None, 2)[2])
    t = Target(proc.pid, process_info(proc.pid), AddressSpace(read_maps(proc.pid)))
    yield proc, t, info
    proc.kill()
    proc.wait()


def test_lifecycle(target: tuple[subprocess.Popen, Target, dict]) -> None:
    proc, t, info = target
    fam = ps.PythonStacks(max_depth=128)
    assert fam.defines()["PY_MAX_DEPTH"] == 128 and fam.defines()["DEEPCTX_PYTHON"] == 1
    assert "python_stack_capture" in fam.source()
    fam.prepare(t)
    interp = fam.interpreter(t.pid)
    assert interp is not None and t.state["python"] is interp
    assert fam.interpreter_modules(t.pid) == interp.modules
    bpf = FakeBPF(128)
    fam.attach(bpf, t)

    slot = bpf[b"py_proc_slots"].data[t.pid].value
    want = ps.proc_config(interp.layout)
    want.pid = t.pid
    ns = os.stat(f"/proc/{t.pid}/ns/pid")
    want.pidns_dev, want.pidns_ino = ns.st_dev, ns.st_ino
    # the walker searches the main interpreter's thread list for threads it does not know
    with ProcessMemory(t.pid) as mem:
        want.threads_head = main_interpreter(mem, interp) + interp.layout.interp_threads_head
        assert mem.read_u64(want.threads_head) != 0
    # 3.10: its ident is a pthread_t, whose struct holds the thread id where glibc keeps it
    want.ident_tid = GLIBC_PTHREAD_TID if interp.layout.ident_is_pthread else ps.PY_NO_OFFSET
    got = bpf[b"py_procs"].data[slot]
    assert bytes(got) == bytes(want), {f: (getattr(got, f), getattr(want, f)) for f, _ in ps.PyProc._fields_}
    threads = bpf[b"py_threads"].data
    main = threads[info["tid"]]
    # entries only for threads with a state: one for a thread without any would hold the walker's search back
    with ProcessMemory(t.pid) as mem:
        states = ThreadMapper(mem, interp).snapshot()
    assert set(threads) == set(states) and states[info["tid"]].tstate == main.tstate
    assert main.tstate != 0 and {th.proc_slot for th in threads.values()} == {slot}

    # a sample of an unknown thread asks for a refresh on the next poll
    refreshes = fam.refreshes
    del threads[info["tid"]]
    bpf[b"py_misses"].data[info["tid"]] = ct.c_uint32(t.pid)
    fam.poll(bpf, t)
    assert fam.refreshes == refreshes + 1 and not bpf[b"py_misses"].data
    assert threads[info["tid"]].tstate == main.tstate

    # an entry the walker wrote (py_found) is the family's to delete when the thread is gone; its OS name stays
    ghost = max(thread_ids(t.pid)) + 100000  # no such thread
    threads[ghost] = ps.PyThread(0, 0, slot, 1)
    bpf[b"py_found"].data[ghost] = ps.PyFoundThread(t.pid, b"loader_7")
    fam._busy_until = 0.0  # as after the attach's while without new threads
    assert not fam.busy()
    fam.poll(bpf, t)
    assert fam.refreshes == refreshes + 2 and not bpf[b"py_found"].data and ghost not in threads
    comm = Path(f"/proc/{t.pid}/comm").read_text().strip()  # read at the refreshes for the live thread
    assert fam.os_thread_names(t.pid) == {info["tid"]: comm, ghost: "loader_7"} and fam.os_thread_names(t.pid + 1) == {}
    assert fam.busy()  # new threads: polls come often for a while, to read their Python names while they live

    # entries the walker could not announce (py_found full, counted) are found in py_threads, and go with their
    # threads all the same
    unannounced = ghost + 1
    threads[unannounced] = ps.PyThread(0, 0, slot, 1)
    bpf[b"py_stats"].data[ps.PYSTACK_STAT_FOUND_LOST] = 1
    fam.poll(bpf, t)  # finds it
    fam._procs[t.pid].last_refresh = 0.0
    fam.poll(bpf, t)  # a refresh: its thread is gone
    assert unannounced not in threads and fam.stats(bpf)["python_found_announcements_lost"] == 2  # 1 on each of 2 CPUs

    # a new stack is named at the next poll, and stays named once the process is gone
    raw = _walk_in_leaf(t.pid, interp, main.tstate)
    value = ps.py_stack_type(128)()
    value.depth, value.flags = len(raw.frames), raw.flags
    for i, f in enumerate(raw.frames):
        value.frames[i].code, value.frames[i].tag, value.frames[i].lasti = f.code, f.tag, f.lasti
        value.frame_flags[i] = f.flags
    bpf[b"py_stacks"].data[42] = value
    bpf[b"py_new_stacks"].queue.append(ps.PyNewStack(42, t.pid, info["tid"]))
    fam.poll(bpf, t)
    proc.kill()
    proc.wait()
    names = [f.frame.name for f in fam.frames(bpf, t, 42)]
    assert names[:4] == ["<module>", "top", "mid", "leaf"]
    assert fam.frames(bpf, None, 42) == fam.frames(bpf, t, 42)
    assert fam.frames(bpf, t, 7) == []  # an id the walker never stored

    stats = fam.stats(bpf)
    assert set(stats) >= {"python_tstate_misses", "python_truncated", "python_read_errors", "python_stacks"}
    fam.detach(bpf, t)
    assert not bpf[b"py_procs"].data and not bpf[b"py_proc_slots"].data and not threads
    assert [f.frame.name for f in fam.frames(bpf, t, 42)][:4] == ["<module>", "top", "mid", "leaf"]
    assert fam.interpreter_modules(t.pid) == interp.modules


def _walk_in_leaf(pid: int, interp: Any, tstate: int) -> Any:
    """The main thread's frames once it is in leaf(): it prints its line from ready() before top() runs (a
    walk right after the line, with the interpreter's facts already cached, can find it still in ready)."""
    deadline = time.monotonic() + 10
    with ProcessMemory(pid) as mem:
        while True:
            raw = userwalk.walk(mem, interp, tstate)
            names = [f.frame.name for f in symbolize_stack(CodeReader(mem, interp), raw)]
            if names[-1:] == ["leaf"] or time.monotonic() > deadline:
                return raw


def test_unsupported_target_is_refused_clearly() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        t = Target(proc.pid, process_info(proc.pid), AddressSpace(read_maps(proc.pid)))
        with pytest.raises(ValueError, match=f"process {proc.pid} is not a Python process"):
            ps.PythonStacks().prepare(t)
    finally:
        proc.kill()
        proc.wait()
