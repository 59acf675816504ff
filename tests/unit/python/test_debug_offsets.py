"""_Py_DebugOffsets parsing: the 3.13 layout and both 3.14 ones (grown groups), built field by field,
and refusal of what is not one."""

from __future__ import annotations

import struct

import pytest

from deepctx.host.python.debug_offsets import parse_debug_offsets
from deepctx.host.python.layouts import layout_from_debug_offsets

# Values chosen to be distinguishable: (group, field) -> value.
RUNTIME = [1000, 24, 632]  # size, finalizing, interpreters_head
THREAD = [300, 0, 8, 16, 72, 152, 160, 176, 184]  # size prev next interp current_frame thread_id native_thread_id ...
FRAME = [80, 8, 0, 56, 80, 70]  # size previous executable instr_ptr localsplus owner
CODE = [220, 112, 120, 128, 136, 68, 52, 96, 104, 200]  # size filename name qualname linetable firstlineno ...
PYOBJECT = [16, 8]
TYPE = [400, 24, 88, 168]
TUPLE = [32, 24, 16]
LIST = [40, 24, 16]
SET = [200, 24, 40, 32]
DICT = [48, 32, 40]
FLOAT = [24, 16]
LONG = [32, 16, 24]
BYTES = [40, 16, 32]
UNICODE = [64, 32, 16, 40]
GC = [400, 8]


def blob(version: int, interp: list[int], frame: list[int], code: list[int], objects: list[list[int]],
         free_threaded: int = 0) -> bytes:
    words = [version, free_threaded, *RUNTIME, *interp, *THREAD, *frame, *code]
    for group in objects:
        words += group
    return b"xdebugpy" + struct.pack(f"<{len(words)}Q", *words) + bytes(64)


INTERP_313 = [7400, 0, 7264, 7344, 8, 9, 10, 11, 12, 13, 14, 15, 16]
INTERP_314A = [7400, 0, 7264, 7344, 7352, 8, 9, 10, 11, 12, 13, 14, 15, 16]  # + threads_main
INTERP_314B = INTERP_314A + [17, 18]  # + code_object_generation, tlbc_generation
OBJECTS_313 = [PYOBJECT, TYPE, TUPLE, LIST, DICT, FLOAT, LONG, BYTES, UNICODE, GC]
OBJECTS_314 = [PYOBJECT, TYPE, TUPLE, LIST, SET, DICT, FLOAT, LONG, BYTES, UNICODE, GC, [100, 1, 2, 3]]

CASES = {
    "3.13": blob(0x030D00F0, INTERP_313, FRAME, CODE, OBJECTS_313),
    "3.14-early": blob(0x030E00A1, INTERP_314A, FRAME + [64], CODE, OBJECTS_314),
    "3.14": blob(0x030E00F0, INTERP_314B, FRAME + [64, 0], CODE + [0], OBJECTS_314),
}


@pytest.mark.parametrize("name", list(CASES))
def test_parses_each_layout(name: str) -> None:
    d = parse_debug_offsets(CASES[name])
    assert (d.runtime_interpreters_head, d.interp_next, d.interp_threads_head) == (632, 7264, 7344)
    assert (d.tstate_next, d.tstate_current_frame, d.tstate_native_thread_id) == (8, 72, 160)
    assert (d.frame_previous, d.frame_executable, d.frame_instr_ptr, d.frame_owner) == (8, 0, 56, 70)
    assert (d.code_filename, d.code_name, d.code_qualname, d.code_linetable) == (112, 120, 128, 136)
    assert (d.code_firstlineno, d.code_adaptive) == (68, 200)
    assert (d.object_type, d.bytes_size, d.bytes_data) == (8, 16, 32)
    assert (d.unicode_state, d.unicode_length, d.unicode_ascii_size) == (32, 16, 40)
    assert not d.free_threaded
    layout = layout_from_debug_offsets(d)
    assert layout.unicode_compact_size == 56 and layout.owner_shim == 3


def test_version_decides_the_extras() -> None:
    assert layout_from_debug_offsets(parse_debug_offsets(CASES["3.13"])).code_firsttraceable == 184
    assert layout_from_debug_offsets(parse_debug_offsets(CASES["3.14"])).code_firsttraceable is None


def test_free_threaded_flag() -> None:
    assert parse_debug_offsets(blob(0x030D00F0, INTERP_313, FRAME, CODE, OBJECTS_313, free_threaded=1)).free_threaded


def test_unknown_future_version_is_refused() -> None:
    d = parse_debug_offsets(blob(0x030F00A1, INTERP_314B, FRAME + [64, 0], CODE + [0], OBJECTS_314))
    with pytest.raises(ValueError, match=r"Python 3\.15 is not supported \(supported: 3\.10, 3\.11, 3\.12, 3\.13, 3\.14\)"):
        layout_from_debug_offsets(d)


def test_not_debug_offsets() -> None:
    with pytest.raises(ValueError, match="cookie"):
        parse_debug_offsets(bytes(512))
    with pytest.raises(ValueError, match="unrecognized"):
        parse_debug_offsets(b"xdebugpy" + bytes(512))
