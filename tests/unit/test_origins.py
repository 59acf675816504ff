"""Origins: how work done for another thread is put under the path that caused it; thread roles."""

from __future__ import annotations

from deepctx.daemon.origins import Origins, creation_frames
from deepctx.host.demangle import type_display_name
from deepctx.host.frames import Frame, thread_frame, thread_role

MAIN = Frame("thread", "python3", tid=10)
PY = [Frame("python", "train", "t.py", 26), Frame("python", "forward", "m.py", 17)]
NATIVE = [Frame("native", "torch::autograd::VariableType::addmm", module="libtorch_cpu.so"),
          Frame("native", "at::sequence_number::get_and_increment()", module="libtorch_cpu.so")]


class Resolver:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def path(self, tid: int, user_stack: int, py_stack: int, lost: bool) -> list[Frame]:
        self.calls.append((tid, user_stack, py_stack, lost))
        return [MAIN, *PY, *NATIVE]


def test_type_names_from_type_info() -> None:
    assert type_display_name("N5torch8autograd9generated14AddmmBackward0E") == "AddmmBackward0"
    assert type_display_name("N4demo14MatmulBackwardE") == "MatmulBackward"
    assert type_display_name("6PyNode") == "PyNode"
    assert type_display_name("N5torch8autograd7CppNodeIN2ns2FnEEE") == "CppNode<ns::Fn>"
    assert type_display_name("not a type") == "not a type"
    assert type_display_name("") == ""


def test_creation_path_ends_at_the_innermost_python_frame() -> None:
    assert creation_frames([MAIN, *PY, *NATIVE]) == [MAIN, *PY]
    assert creation_frames([MAIN, *NATIVE]) == [MAIN, *NATIVE]  # no Python frame: all kept


def test_node_origin_names_the_node_and_cuts_native_frames() -> None:
    r = Resolver()
    o = Origins(["[autograd backward]", "[node]", "[backward of {node}]"], {0x1000: "AddmmBackward0"})
    assert o.frames(r, 10, 5, 6, 2, 0x1000) == [MAIN, *PY, Frame("op", "[backward of AddmmBackward0]")]
    assert o.frames(r, 10, 5, 6, 2, 0x2000)[-1] == Frame("op", "[backward of node type 0x2000]")
    # a hand-off origin keeps its whole path (the hand-off call's own frames say where it was made)
    assert o.frames(r, 10, 0, 6, 0, 0) == [MAIN, *PY, *NATIVE, Frame("op", "[autograd backward]")]
    assert r.calls[-1] == (10, 0, 6, True)
    assert o.frames(r, 10, 5, 6, 7, 0)[-1] == Frame("op", "[hand-off]")


def test_worker_threads_get_a_role_from_how_their_work_got_there() -> None:
    r = Resolver()
    o = Origins(["[xla execute]", "[my pool]", "[backward of {node}]"], {1: "MulBackward0"})
    worker = [Frame("thread", "python3", tid=12), Frame("native", "Execute")]
    assert o.frames(r, 10, 5, 6, 0, 0, worker)[-2:] == [Frame("thread", "python3 (xla executor)", tid=12),
                                                        Frame("native", "Execute")]
    assert o.frames(r, 10, 5, 6, 1, 0, worker)[-2] == Frame("thread", "python3", tid=12)  # no role known
    named = [Frame("thread", "pt_autograd_0 (autograd device 0)", tid=13)]
    assert o.frames(r, 10, 5, 6, 2, 1, named)[-1] == named[0]  # a role from its name stays
    assert worker[0].name == "python3"  # the caller's list is not changed


def test_thread_roles() -> None:
    assert thread_role(10, 10, "python3") == "MainThread"
    assert thread_role(10, 11, "pt_autograd_0") == "autograd device 0"
    assert thread_role(10, 12, "pt_autograd_7") == "autograd device 7"
    assert thread_role(10, 13, "tf_XLAEigen") == "xla executor"
    assert thread_role(10, 14, "worker") is None
    assert thread_frame(11, "pt_autograd_0", 10) == Frame("thread", "pt_autograd_0 (autograd device 0)", tid=11)
    assert thread_frame(14, "worker", 10) == Frame("thread", "worker", tid=14)
    assert thread_frame(10, "python3") == Frame("thread", "python3", tid=10)  # no pid: no role
