"""`_Py_DebugOffsets`, the self-description at the start of `_PyRuntime` in CPython 3.13+.

The struct is a list of u64s grouped by the struct they describe, each group starting with that
struct's size. Groups grew between 3.13 and 3.14 (and during 3.14's development), so past the
first groups they are found by signatures that hold in every version: PyThreadState starts with
prev, next, interp (0, 8, 16); a code object keeps co_filename, co_name, co_qualname adjacent;
PyObject is (size 16, ob_type 8); PyASCIIObject has state at 32 and length at 16."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = b"xdebugpy"
MAX_SIZE = 1024  # bytes to read: the 3.14 struct is about 600


@dataclass(frozen=True)
class DebugOffsets:
    version: int  # PY_VERSION_HEX
    free_threaded: bool
    runtime_interpreters_head: int
    interp_next: int
    interp_threads_head: int
    tstate_next: int
    tstate_current_frame: int
    tstate_native_thread_id: int
    frame_previous: int
    frame_executable: int
    frame_instr_ptr: int
    frame_owner: int
    code_filename: int
    code_name: int
    code_qualname: int
    code_linetable: int
    code_firstlineno: int
    code_adaptive: int
    object_type: int
    bytes_size: int
    bytes_data: int
    unicode_state: int
    unicode_length: int
    unicode_ascii_size: int


def _find(words: list[int], start: int, stop: int, ok: Callable[[int], bool]) -> int:
    for i in range(start, min(stop, len(words) - 4)):
        if ok(i):
            return i
    raise ValueError("unrecognized _Py_DebugOffsets layout")


def parse_debug_offsets(blob: bytes) -> DebugOffsets:
    """Parses the struct; raises ValueError when `blob` does not start with one we understand."""
    if not blob.startswith(COOKIE):
        raise ValueError("no _Py_DebugOffsets cookie")
    n = len(blob) // 8
    w = list(struct.unpack_from(f"<{n}Q", blob))
    # w[0] cookie, w[1] version, w[2] free_threaded, w[3:6] runtime_state, w[6:] interpreter_state
    interp = 6
    ts = _find(w, interp + 4, interp + 24, lambda i: w[i] > 64 and w[i + 1 : i + 4] == [0, 8, 16])
    frame = ts + 9  # thread_state: size prev next interp current_frame thread_id native_thread_id ...
    code = _find(
        w, frame + 6, frame + 10, lambda i: w[i + 2] == w[i + 1] + 8 and w[i + 3] == w[i + 1] + 16 and w[i] > 100
    )
    pyobj = _find(w, code + 10, code + 14, lambda i: w[i] == 16 and w[i + 1] == 8)
    uni = _find(w, pyobj + 2, pyobj + 40, lambda i: w[i + 1] == 32 and w[i + 2] == 16 and w[i + 3] in (40, 48))
    byt = uni - 3  # bytes_object (size, ob_size, ob_sval) comes right before unicode_object
    if w[byt + 1 : byt + 3] != [16, 32]:
        raise ValueError("unrecognized _Py_DebugOffsets layout (bytes object)")
    return DebugOffsets(
        version=w[1],
        free_threaded=bool(w[2]),
        runtime_interpreters_head=w[5],
        interp_next=w[interp + 2],
        interp_threads_head=w[interp + 3],
        tstate_next=w[ts + 2],
        tstate_current_frame=w[ts + 4],
        tstate_native_thread_id=w[ts + 6],
        frame_previous=w[frame + 1],
        frame_executable=w[frame + 2],
        frame_instr_ptr=w[frame + 3],
        frame_owner=w[frame + 5],
        code_filename=w[code + 1],
        code_name=w[code + 2],
        code_qualname=w[code + 3],
        code_linetable=w[code + 4],
        code_firstlineno=w[code + 5],
        code_adaptive=w[code + 9],
        object_type=w[pyobj + 1],
        bytes_size=w[byt + 1],
        bytes_data=w[byt + 2],
        unicode_state=w[uni + 1],
        unicode_length=w[uni + 2],
        unicode_ascii_size=w[uni + 3],
    )
