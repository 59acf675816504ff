"""Synthetic frames mean one thing each (issue 35.2): the marker a cut walk gets names its cause, the profile
counts the samples and GPU calls under each label in its own stat, and warns naming the cause."""

from __future__ import annotations

import ctypes as ct
import os

import pytest

from deepctx.daemon.callpaths import CallPathResolver
from deepctx.daemon.capture import CaptureResult, stat_warnings
from deepctx.daemon.gpu_tree import NEEDS_AGENT_KERNEL, NOT_SAMPLED, UNNAMED_KERNEL
from deepctx.daemon.label_stats import label_stats, label_warnings
from deepctx.daemon.profile_wire import to_message
from deepctx.daemon.symbolize.native import NativeSymbolizer, SymbolCache
from deepctx.daemon.tree import CallTree
from deepctx.daemon.unwind_stops import stop_marker
from deepctx.host.frames import (
    DEEPCTX_PROBE,
    PYTHON_MISSING,
    PYTHON_UNREADABLE,
    TRUNCATED,
    UNWIND_LOST,
    UNWIND_STOPPED,
    Frame,
)
from deepctx.host.procfs import AddressSpace, read_maps
from deepctx.host.python.merge import merge_stacks
from deepctx.host.python.pyframe import PyFrameInfo
from deepctx.probes.native_unwind import (
    NATIVE_F_BAD_FRAME,
    NATIVE_F_COMPLETE,
    NATIVE_F_NO_PROC,
    NATIVE_F_NO_TABLE,
    NATIVE_F_READ_ERROR,
    NATIVE_F_TRUNCATED,
    NATIVE_F_UNSUPPORTED,
)
from deepctx.profiles.document import to_doc

THREAD = Frame("thread", "python3 (MainThread)", tid=7)
MAIN = Frame("python", "main", "/app/run.py", 3, "run")
STEP = Frame("python", "step", "/app/run.py", 9, "run")


@pytest.mark.parametrize(("flags", "marker"), [
    (NATIVE_F_COMPLETE, None),
    (NATIVE_F_TRUNCATED, TRUNCATED),
    (NATIVE_F_TRUNCATED | NATIVE_F_NO_TABLE, TRUNCATED),  # the depth limit ended it first
    (NATIVE_F_NO_TABLE, UNWIND_STOPPED["no_table"]),
    (NATIVE_F_READ_ERROR, UNWIND_STOPPED["read_error"]),
    (NATIVE_F_UNSUPPORTED, UNWIND_STOPPED["unsupported"]),
    (NATIVE_F_BAD_FRAME, UNWIND_STOPPED["bad_frame"]),
    (NATIVE_F_NO_PROC, UNWIND_STOPPED["no_proc"]),
    (0, UNWIND_STOPPED["other"]),
])
def test_a_native_walk_that_stopped_is_marked_with_its_reason(flags: int, marker: Frame | None) -> None:
    assert stop_marker(flags) == marker


def resolver(cuts: dict[int, bool | Frame]) -> CallPathResolver:
    return CallPathResolver(7, AddressSpace([]), lambda sid: ([], cuts[sid]), NativeSymbolizer(SymbolCache()),
                            {7: "python3"})


def test_the_resolver_puts_the_cause_above_the_stack_and_counts_depth_cuts_apart() -> None:
    r = resolver({1: True, 2: UNWIND_STOPPED["no_table"], 3: False, 4: UNWIND_STOPPED["read_error"]})
    assert r.native_frames(1, False) == [TRUNCATED]  # the kernel's walk: True is its depth limit
    assert r.native_frames(2, False) == [UNWIND_STOPPED["no_table"]]
    assert r.native_frames(3, False) == [] and r.native_frames(4, False) == [UNWIND_STOPPED["read_error"]]
    assert (r.truncated_stacks, r.stopped_stacks) == (1, 2)


def _address(fn: ct._CFuncPtr) -> int:
    addr = ct.cast(fn, ct.c_void_p).value
    assert addr
    return addr


class CraftedUnwinder:
    """The native unwinder family's stack reads, with flags as the BPF walker sets them."""

    def __init__(self, stacks: dict[int, tuple[list[int], int]]) -> None:
        self.stacks = stacks

    def stack(self, bpf: object, stack_id: int) -> tuple[list[int], int]:
        return self.stacks.get(stack_id, ([], 0))


def test_dwarf_stacks_are_read_with_the_reason_their_walk_stopped() -> None:
    from deepctx.daemon.probe_set import _unwinder_reader

    libc = ct.CDLL(None)  # return addresses in this process's libc: executable memory the symbolizer names
    ips = [_address(libc.getpid) + 4, _address(libc.getppid) + 4]
    read = _unwinder_reader(None, CraftedUnwinder({
        1: (ips, NATIVE_F_NO_TABLE), 2: (ips, NATIVE_F_TRUNCATED | NATIVE_F_NO_TABLE),
        3: (ips, NATIVE_F_COMPLETE | NATIVE_F_NO_TABLE), 4: (ips, NATIVE_F_READ_ERROR)}))
    assert read(1) == (ips, UNWIND_STOPPED["no_table"])  # stopped for lack of a table: not [truncated]
    assert read(2) == (ips, TRUNCATED)  # the depth limit
    assert read(3) == (ips, False)  # frame pointers carried the walk over the code without a table to the entry
    assert read(4) == (ips, UNWIND_STOPPED["read_error"]) and read(5) == ([], False)  # an id the map lost
    r = CallPathResolver(os.getpid(), AddressSpace(read_maps(os.getpid())), read, NativeSymbolizer(SymbolCache()),
                         {7: "python3"})
    assert [r.native_frames(sid, False)[0].name for sid in (1, 2)] == [
        "[unwinding stopped: no unwind table]", "[truncated]"]
    assert len(r.native_frames(1, False)) == 3 and len(r.native_frames(3, False)) == 2
    assert (r.truncated_stacks, r.stopped_stacks) == (1, 1)


def test_a_python_marker_stays_above_the_frames_it_cut() -> None:
    py = [PyFrameInfo(PYTHON_UNREADABLE, True), PyFrameInfo(STEP, True)]
    ev = Frame("native", "_PyEval_EvalFrameDefault", module="libpython3.12.so")
    merged = merge_stacks([Frame("native", "_start", module="python3"), ev, Frame("native", "memcpy", module="libc.so.6")],
                          py, {"libpython3.12.so"})
    assert merged == [Frame("native", "_start", module="python3"), PYTHON_UNREADABLE, STEP,
                      Frame("native", "memcpy", module="libc.so.6")]


def test_a_python_thread_without_its_python_frames_is_marked_where_they_belong() -> None:
    """The walker had no stack (its thread state was not found): the marker takes the eval loop's place, in a
    Python process only, and only where the thread was running Python code."""
    libpy = "libpython3.12.so"
    ev = Frame("native", "_PyEval_EvalFrameDefault", module=libpy)
    start = Frame("native", "start_thread", module="libc.so.6")
    leaf = Frame("native", "clock_gettime", module="libc.so.6")
    stacks = {1: [start, Frame("native", "thread_run", module=libpy), ev, Frame("native", "PyObject_Call", module=libpy),
                  ev, leaf],
              2: [start, Frame("native", "PyThreadState_Clear", module=libpy), Frame("native", "munmap", module="libc.so.6")]}

    class Named(NativeSymbolizer):
        def symbolize_stack(self, pid: int, space: AddressSpace, ips: list[int]) -> list[Frame]:
            return list(stacks[ips[0]])

    def make(read_python: bool) -> CallPathResolver:
        return CallPathResolver(7, AddressSpace([]), lambda sid: ([sid], False), Named(SymbolCache()), {7: "python3"},
                                read_python=(lambda sid: []) if read_python else None, python_modules={libpy})

    r = make(True)
    assert r.path(7, 1, 0, False)[1:] == [start, PYTHON_MISSING, leaf]
    assert r.path(7, 2, 0, False)[1:] == stacks[2]  # its thread state's teardown: no Python code ran
    assert make(False).path(7, 1, 0, False)[1:] == stacks[1]  # not a Python capture: nothing is said missing


def labelled_tree() -> CallTree:
    """40 samples cut at the depth limit (10 of them also in code with no symbol or mapping), 7 with an
    unreadable Python frame, 5 under an unwinder stop, 3 under a frame-pointer walk that went astray, 2 and 4 in
    Python frames of an exited process and of freed code, 1 lost stack; 30 launches of an unnamed kernel, 6 of them
    from a call path whose code was freed; 9 launches with no sampled call path; 11 samples and 12 launches of a
    thread running Python whose Python stack the walker did not have; 8 samples in deepctx's probe; 5 launches of
    a kernel only the agent would have named; 100 clean samples."""
    t = CallTree("python3 run.py")
    t.add([THREAD, TRUNCATED, STEP], "cpu_samples", 30)
    t.add([THREAD, TRUNCATED, STEP, Frame("native", "[unmapped]+0x7f0012", module="[unmapped]")], "cpu_samples", 10)
    t.add([THREAD, PYTHON_UNREADABLE, STEP], "cpu_samples", 7)
    t.add([THREAD, UNWIND_STOPPED["no_table"], MAIN, STEP], "cpu_samples", 5)
    t.add([THREAD, UNWIND_LOST, Frame("native", "memcpy", module="libc.so.6")], "cpu_samples", 3)
    t.add([THREAD, MAIN, Frame("python", "[unknown]")], "cpu_samples", 2)
    t.add([THREAD, MAIN, Frame("python", "[code object freed]"), STEP], "cpu_samples", 4)
    t.add([THREAD, Frame("native", "[lost user stack]")], "cpu_samples", 1)
    t.add([THREAD, MAIN, STEP], "cpu_samples", 100)
    api = Frame("api", "cudaLaunchKernel", module="libcudart.so.13")
    t.add([THREAD, MAIN, api, Frame("kernel", UNNAMED_KERNEL)], "calls", 24)
    t.add([THREAD, MAIN, Frame("python", "[code object freed]"), api, Frame("kernel", UNNAMED_KERNEL)], "calls", 6)
    t.add([THREAD, TRUNCATED, TRUNCATED, STEP], "cpu_samples", 0)  # nested: a path counts once per label
    t.add([THREAD, NOT_SAMPLED, api, Frame("kernel", "gemm")], "calls", 9)
    t.add([THREAD, PYTHON_MISSING, Frame("native", "clock_gettime", module="libc.so.6")], "cpu_samples", 11)
    t.add([THREAD, PYTHON_MISSING, api, Frame("kernel", "gemm")], "calls", 12)
    t.add([THREAD, MAIN, STEP, Frame("native", "cudaLaunchKernel", module="libcudart.so.13"), DEEPCTX_PROBE],
          "cpu_samples", 8)
    t.add([THREAD, MAIN, api, Frame("kernel", NEEDS_AGENT_KERNEL)], "calls", 5)
    return t


def test_each_label_has_its_own_stat_with_exact_counts() -> None:
    stats = label_stats(labelled_tree())
    assert stats == {
        "cpu_samples_truncated": 40, "cpu_samples_unmapped": 10, "cpu_samples_python_unreadable": 7,
        "cpu_samples_unwinding_stopped": 5, "cpu_samples_unwind_lost": 3, "cpu_samples_python_unknown": 2,
        "cpu_samples_python_freed_code": 4, "gpu_calls_python_freed_code": 6, "cpu_samples_user_stack_lost": 1,
        "gpu_calls_unnamed_kernel": 30, "gpu_calls_not_sampled": 9, "cpu_samples_python_missing": 11,
        "gpu_calls_python_missing": 12, "cpu_samples_in_probes": 8, "gpu_calls_kernel_named_by_agent_only": 5}
    assert label_stats(CallTree("clean")) == {}  # no labels, no stats


def test_each_cause_is_warned_in_its_own_words() -> None:
    stats = {**label_stats(labelled_tree()), "cpu_samples_in_profile": 200}
    warnings = label_warnings(stats)
    assert len(warnings) == 12  # every label but the lost stack (cpu_user_stacks_lost has its warning)
    assert warnings[0] == ("[truncated] on 40 CPU samples (20.0% of the profile): a call path deeper than the walkers' "
                           "depth limit loses its outermost frames there (native: kernel.perf_event_max_stack or the "
                           "unwinder's depth; Python: python_max_depth)")
    unknown = next(w for w in warnings if w.startswith("[unknown]"))
    assert unknown.startswith("[unknown] Python frames on 2 CPU samples (1.0% of the profile): the process had exited "
                              "before deepctxd read their code objects")
    freed = next(w for w in warnings if w.startswith("[code object freed]"))
    assert freed.startswith("[code object freed] Python frames on 4 CPU samples (2.0% of the profile) and 6 GPU calls: "
                            "the process was running")
    assert next(w for w in warnings if w.startswith("[Python walk stopped")).startswith(
        "[Python walk stopped: unreadable frame] on 7 CPU samples (3.5% of the profile): the Python walker could not "
        "read a frame")
    assert next(w for w in warnings if w.startswith("[Python frames missing]")).startswith(
        "[Python frames missing] on 11 CPU samples (5.5% of the profile) and 12 GPU calls: the thread was running "
        "Python code but the Python walker had no stack for it: it found no thread state for the thread")
    assert next(w for w in warnings if w.startswith("[deepctx probe]")).startswith(
        "[deepctx probe] on 8 CPU samples (4.0% of the profile): the target's threads were in deepctx's own probes")
    assert warnings[-3].startswith("[call path not sampled] on 9 GPU calls: sampled mode took no call path")
    assert warnings[-2] == ("[unnamed kernel] on 30 kernel launches: the runtime passed no kernel name deepctxd could "
                            "resolve")
    assert warnings[-1].startswith("[kernel named by the agent only] on 5 kernel launches: their kernel handles were "
                                   "made before the capture")
    one = label_warnings({"cpu_samples_unwind_lost": 1, "gpu_calls_unnamed_kernel": 1})
    assert one[0].startswith("[unwinding lost the callers] on 1 CPU sample: ") and one[1].startswith(
        "[unnamed kernel] on 1 kernel launch: ")
    assert label_warnings({}) == []


def test_the_profile_carries_the_label_stats_and_only_the_label_warnings_name_unknown_frames() -> None:
    tree = labelled_tree()
    stats = {"cpu_samples": 205, "cpu_samples_in_profile": 205, "python_unknown_frames": 1}
    assert stat_warnings(stats) == []  # the old sentence blamed an exit in a process that had not exited (#35.2)
    result = CaptureResult(pid=7, command="python3 run.py", duration_s=1.0, started_unix=0.0, ended="duration",
                           sample_hz=99, tree=tree, stats=stats, warnings=stat_warnings(stats))
    doc = to_doc(to_message(result))
    assert doc["stats"]["cpu_samples_truncated"] == 40 and doc["stats"]["gpu_calls_unnamed_kernel"] == 30
    assert doc["warnings"] == label_warnings({**stats, **label_stats(tree)})
    assert [w.split(" on ")[0] for w in doc["warnings"] if "[unknown]" in w] == ["[unknown] Python frames"]
