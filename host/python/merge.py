"""One call path from a native stack and the Python frames of the same sample.

Each native `_PyEval_EvalFrameDefault` activation runs the Python frames from its entry frame up
to the next entry frame: those frames take its place, in order. Other frames of the interpreter's
own ELF files are dropped unless asked for; C extensions, libc and the rest stay where they are.
When the native stack is missing activations (unwinding stopped early), activations are matched
from the innermost one, which the unwinder reaches first, and the Python frames left over go above
everything found: no Python frame is ever lost.
"""

from __future__ import annotations

from deepctx.host.frames import CUT_MARKERS, PYTHON_MISSING, Frame
from deepctx.host.python.pyframe import PyFrameInfo

EVAL_FUNCTION = "_PyEval_EvalFrameDefault"


def is_eval_activation(f: Frame, python_modules: set[str]) -> bool:
    # GCC may split the function: its cold part is "_PyEval_EvalFrameDefault.cold"
    return (
        f.kind == "native"
        and f.module in python_modules
        and (f.name == EVAL_FUNCTION or f.name.startswith(EVAL_FUNCTION + "."))
    )


def group_activations(python: list[PyFrameInfo]) -> tuple[Frame | None, list[list[Frame]]]:
    """(truncation marker or None, Python frames per eval activation, outermost first). Frames
    before the first entry frame form a group too: their entry frame was cut off."""
    marker = None
    if python and python[0].frame in CUT_MARKERS:
        marker, python = python[0].frame, python[1:]
    groups: list[list[Frame]] = []
    for info in python:
        if info.is_entry or not groups:
            groups.append([])
        groups[-1].append(info.frame)
    return marker, groups


def merge_stacks(
    native: list[Frame], python: list[PyFrameInfo], python_modules: set[str], keep_libpython: bool = False
) -> list[Frame]:
    """Both stacks outermost first; so is the result."""
    marker, groups = group_activations(python)
    evals = [i for i, f in enumerate(native) if is_eval_activation(f, python_modules)]
    n = min(len(evals), len(groups))
    matched = dict(zip(evals[len(evals) - n :], groups[len(groups) - n :], strict=True))
    unmatched = set(evals[: len(evals) - n])
    out: list[Frame] = []
    leftover = [f for g in groups[: len(groups) - n] for f in g]
    if leftover:
        out += ([marker] if marker else []) + leftover
        marker = None
    for i, f in enumerate(native):
        if i in matched:
            if marker:  # the cut-off Python frames were outside the outermost activation found
                out.append(marker)
                marker = None
            out += matched[i]
        elif i in unmatched:
            if marker:  # an activation whose Python frames the walker could not reach
                out.append(marker)
                marker = None
            elif keep_libpython:
                out.append(f)
        elif keep_libpython or f.kind != "native" or f.module not in python_modules:
            out.append(f)
    if marker:
        out.insert(0, marker)
    return out


def mark_missing_python(native: list[Frame], python_modules: set[str], keep_libpython: bool = False) -> list[Frame]:
    """A sample without Python frames: where its native stack shows the thread running Python code (an eval
    activation), the PYTHON_MISSING marker takes the activations' place as Python frames would; a thread outside
    Python (no activation) keeps its native frames as they are."""
    if not any(is_eval_activation(f, python_modules) for f in native):
        return native
    return merge_stacks(native, [PyFrameInfo(PYTHON_MISSING, True)], python_modules, keep_libpython)
