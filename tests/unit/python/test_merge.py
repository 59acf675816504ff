"""merge_stacks on synthetic stacks: where Python frames go, what is dropped, and that no Python
frame is ever lost, whatever the native unwinder found."""

import random

from deepctx.host.frames import PYTHON_MISSING, TRUNCATED, Frame
from deepctx.host.python.merge import group_activations, mark_missing_python, merge_stacks
from deepctx.host.python.pyframe import PyFrameInfo

LIBPY = "libpython3.11.so.1.0"
EXE = "python3.11"
MODS = {LIBPY, EXE}
EVAL = "_PyEval_EvalFrameDefault"


def nat(name, module=LIBPY):
    return Frame("native", name, module=module)


def ev(module=LIBPY):
    return nat(EVAL, module)


def py(name, entry=False):
    return PyFrameInfo(Frame("python", name, "/srv/app.py", 10, "app"), entry)


def names(frames):
    return [f.name for f in frames]


START = [nat("_start", EXE), nat("__libc_start_main", "libc.so.6"), nat("main", EXE), nat("Py_RunMain")]


def test_each_activation_takes_its_frames_in_order():
    native = [*START, ev(), nat("_PyFunction_Vectorcall"), nat("PyObject_Call"), ev()]
    python = [py("<module>", True), py("top"), py("mid", True), py("leaf")]
    assert names(merge_stacks(native, python, MODS)) == ["__libc_start_main", "<module>", "top", "mid", "leaf"]


def test_c_extension_frames_stay_between_activations():
    native = [ev(), nat("ext_apply", "_ext.cpython-311-x86_64-linux-gnu.so"), nat("PyObject_Call"), ev()]
    python = [py("<module>", True), py("apply_all"), py("callback", True)]
    assert names(merge_stacks(native, python, MODS)) == ["<module>", "apply_all", "ext_apply", "callback"]


def test_qsort_callback_sits_between_caller_and_comparator():
    ctypes_mod = "_ctypes.cpython-311-x86_64-linux-gnu.so"
    native = [
        *START, ev(), nat("_PyObject_MakeTpCall"), nat("PyCFuncPtr_call", ctypes_mod),
        nat("ffi_call", "libffi.so.8"), nat("qsort", "libc.so.6"), nat("msort_with_tmp", "libc.so.6"),
        nat("ffi_closure_unix64_inner", "libffi.so.8"), nat("_CallPythonObject", ctypes_mod),
        nat("_PyObject_Call"), ev(),
    ]
    python = [py("<module>", True), py("sort_numbers"), py("compare", True)]
    assert names(merge_stacks(native, python, MODS)) == [
        "__libc_start_main", "<module>", "sort_numbers", "PyCFuncPtr_call", "ffi_call", "qsort",
        "msort_with_tmp", "ffi_closure_unix64_inner", "_CallPythonObject", "compare",
    ]


def test_leaf_in_c_below_python():
    native = [ev(), nat("time_sleep"), nat("clock_nanosleep", "libc.so.6")]
    python = [py("<module>", True), py("wait")]
    assert names(merge_stacks(native, python, MODS)) == ["<module>", "wait", "clock_nanosleep"]


def test_missing_python_frames_are_marked_at_the_innermost_activation():
    native = [*START, ev(), nat("PyObject_Call"), ev(), nat("clock_gettime", "libc.so.6")]
    assert names(mark_missing_python(native, MODS)) == ["__libc_start_main", PYTHON_MISSING.name, "clock_gettime"]
    kept = mark_missing_python(native, MODS, keep_libpython=True)
    assert names(kept) == [*names(START), EVAL, "PyObject_Call", PYTHON_MISSING.name, "clock_gettime"]
    outside = [nat("start_thread", "libc.so.6"), nat("PyThreadState_Clear"), nat("munmap", "libc.so.6")]
    assert mark_missing_python(outside, MODS) == outside  # no Python code running: nothing is missing


def test_static_interpreter_executable_is_the_python_module():
    native = [nat("main", "python3.11"), ev("python3.11"), nat("PyObject_Vectorcall", "python3.11")]
    python = [py("<module>", True), py("work")]
    assert names(merge_stacks(native, python, {"python3.11"})) == ["<module>", "work"]


def test_keep_libpython_keeps_interpreter_frames_but_still_replaces_eval():
    native = [nat("Py_RunMain"), ev(), nat("PyObject_Call"), ev()]
    python = [py("<module>", True), py("f", True)]
    assert names(merge_stacks(native, python, MODS, keep_libpython=True)) == [
        "Py_RunMain", "<module>", "PyObject_Call", "f",
    ]


def test_cold_part_of_eval_counts_as_activation():
    native = [ev(), nat(EVAL + ".cold")]
    python = [py("<module>", True), py("f", True)]
    assert names(merge_stacks(native, python, MODS)) == ["<module>", "f"]


def test_missing_outer_activations_put_leftover_python_frames_on_top():
    # frame-pointer unwinding stopped inside libpython: only the innermost activation was found
    native = [nat("0x7f00dead", "[unknown]"), ev(), nat("memcpy", "libc.so.6")]
    python = [py("<module>", True), py("a"), py("b", True), py("c", True), py("d")]
    assert names(merge_stacks(native, python, MODS)) == ["<module>", "a", "b", "0x7f00dead", "c", "d", "memcpy"]


def test_no_activation_found_at_all():
    native = [nat("qsort", "libc.so.6")]
    python = [py("<module>", True), py("sort_numbers"), py("compare", True)]
    assert names(merge_stacks(native, python, MODS)) == ["<module>", "sort_numbers", "compare", "qsort"]


def test_empty_native_stack():
    python = [py("<module>", True), py("f")]
    assert names(merge_stacks([], python, MODS)) == ["<module>", "f"]


def test_more_activations_than_python_groups_drops_the_outer_ones():
    native = [ev(), nat("PyObject_Call"), ev()]
    python = [py("f", True), py("g")]
    assert names(merge_stacks(native, python, MODS)) == ["f", "g"]


def test_truncated_python_stack_marks_the_activations_it_could_not_reach():
    native = [*START, ev(), nat("PyObject_Call"), ev(), nat("PyObject_Call"), ev()]
    # the walker kept the innermost frames only: the first group lost its entry frame
    python = [PyFrameInfo(TRUNCATED, True), py("recurse"), py("recurse"), py("bottom", True)]
    out = merge_stacks(native, python, MODS)
    assert out == [nat("__libc_start_main", "libc.so.6"), TRUNCATED] + [f.frame for f in python[1:]]


def test_truncated_without_spare_activation_goes_right_above_python_frames():
    native = [nat("__libc_start_main", "libc.so.6"), ev()]
    python = [PyFrameInfo(TRUNCATED, True), py("recurse"), py("bottom")]
    assert names(merge_stacks(native, python, MODS)) == ["__libc_start_main", "[truncated]", "recurse", "bottom"]


def test_truncated_and_leftover_marker_tops_everything():
    python = [PyFrameInfo(TRUNCATED, True), py("recurse"), py("bottom")]
    assert names(merge_stacks([nat("memcpy", "libc.so.6")], python, MODS)) == [
        "[truncated]", "recurse", "bottom", "memcpy",
    ]


def test_python_310_every_frame_is_its_own_activation():
    native = [ev(), nat("_PyFunction_Vectorcall"), ev(), nat("_PyFunction_Vectorcall"), ev()]
    python = [py("<module>", True), py("top", True), py("leaf", True)]
    assert names(merge_stacks(native, python, MODS)) == ["<module>", "top", "leaf"]


def test_grouping():
    marker, groups = group_activations([py("a"), py("b", True), py("c"), py("d", True)])
    assert marker is None and [names(g) for g in groups] == [["a"], ["b", "c"], ["d"]]


def test_python_frames_never_lost_nor_reordered():
    for seed in range(1000):
        check_random_merge(random.Random(seed))


def check_random_merge(rng):
    python = [py(f"p{i}", entry=(i == 0 or rng.random() < 0.4)) for i in range(rng.randint(1, 12))]
    if rng.random() < 0.2:
        python.insert(0, PyFrameInfo(TRUNCATED, True))
    pool = [ev(), ev(), nat("PyObject_Call"), nat("ext", "_ext.so"), nat("qsort", "libc.so.6"),
            nat(EVAL + ".cold"), nat("[unknown]", "[unknown]")]
    native = [rng.choice(pool) for _ in range(rng.randint(0, 10))]
    keep = rng.random() < 0.3
    out = merge_stacks(native, python, MODS, keep_libpython=keep)
    assert [f for f in out if f.kind == "python"] == [i.frame for i in python if i.frame.kind == "python"]
    assert out.count(TRUNCATED) == (1 if python[0].frame == TRUNCATED else 0)
    # non-interpreter native frames all survive, in order
    assert [f for f in out if f.kind == "native" and f.module not in MODS and f != TRUNCATED] == [
        f for f in native if f.module not in MODS
    ]
    if not keep:
        assert not any(f.module in MODS for f in out)
