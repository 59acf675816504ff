"""probes/gpu_thread_names.py on a real BPF map of the GPU program's declaration: a process's gone threads'
names go after the window they served, all of its names when its capture detaches, and another process's
entries stay."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from harness import wait_for

from deepctx.probes.gpu_thread_names import GpuThreadNames

PROBES_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "probes")
SOURCE = '#include "gpu_api.h"\nBPF_HASH(gpu_comms, __u64, struct gpu_comm, 64);\n'
OTHER_PID = 1  # init: lives, and is not this process


@pytest.fixture
def bpf() -> Iterator[Any]:
    from bcc import BPF

    b = BPF(text=SOURCE.encode(), cflags=[f"-I{PROBES_DIR}"])
    yield b
    b.cleanup()


def put(bpf: Any, pid: int, tid: int, name: bytes) -> None:
    t = bpf[b"gpu_comms"]
    leaf = t.Leaf()
    leaf.comm = name
    t[t.Key(pid << 32 | tid)] = leaf


def test_gone_threads_go_after_their_window_and_the_rest_at_detach(bpf: Any) -> None:
    gone = threading.Thread(target=lambda: None)
    gone.start()
    gone.join()
    assert gone.native_id is not None
    # join() returns once the thread's Python part is done; the kernel lets its task go just after
    wait_for(lambda: not os.path.exists(f"/proc/{os.getpid()}/task/{gone.native_id}"), what="the thread's task gone")
    me, here = os.getpid(), threading.get_native_id()
    put(bpf, me, here, b"alive")
    put(bpf, me, gone.native_id, b"gone")
    put(bpf, OTHER_PID, gone.native_id, b"other")  # the same tid in another process: not this capture's
    names = GpuThreadNames()
    assert names.names(bpf, me) == {here: "alive", gone.native_id: "gone"}
    assert names.names(bpf, OTHER_PID) == {gone.native_id: "other"}

    names.at_cut(bpf, me)
    assert names.names(bpf, me) == {here: "alive", gone.native_id: "gone"}  # the window being cut still needs it
    names.after_window(bpf, me)
    assert names.names(bpf, me) == {here: "alive"}
    names.after_window(bpf, me)  # no cut since: nothing more goes
    assert names.names(bpf, me) == {here: "alive"}
    assert names.names(bpf, OTHER_PID) == {gone.native_id: "other"}

    names.forget(bpf, me)
    assert names.names(bpf, me) == {}
    assert names.names(bpf, OTHER_PID) == {gone.native_id: "other"}
