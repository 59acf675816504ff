"""The per-version layouts against each installed interpreter's own internal headers (offsetof with
Py_BUILD_CORE), and 3.13+'s _Py_DebugOffsets as the interpreter's ELF file carries it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from c_layout import c_values
from targets.python.pythons import INTERPRETERS, Interpreter

from deepctx.host.elf.image import ElfImage
from deepctx.host.python.debug_offsets import MAX_SIZE, parse_debug_offsets
from deepctx.host.python.layouts import LAYOUTS, TSTATE_READ_MAX, PyLayout, layout_from_debug_offsets
from deepctx.probes.python_stack import proc_config


def include_dir(interp: Interpreter) -> Path | None:
    assert interp.path is not None
    name = f"python{interp.version[0]}.{interp.version[1]}"
    for d in (interp.path.parent.parent / "include" / name, Path("/usr/include") / name):
        if (d / "internal" / "pycore_runtime.h").exists():
            return d
    return None


def c_fields(v: tuple[int, int]) -> dict[str, str]:
    """Layout field -> the C expression that gives its value in version v."""
    frame = "PyFrameObject" if v < (3, 11) else "_PyInterpreterFrame"
    f = {
        "runtime_interpreters_head": "offsetof(_PyRuntimeState, interpreters.head)",
        "interp_next": "offsetof(PyInterpreterState, next)",
        "interp_threads_head": "offsetof(PyInterpreterState, tstate_head)" if v < (3, 11)
        else "offsetof(PyInterpreterState, threads.head)",
        "tstate_next": "offsetof(PyThreadState, next)",
        "tstate_ident": "offsetof(PyThreadState, thread_id)" if v < (3, 11)
        else "offsetof(PyThreadState, native_thread_id)",
        "tstate_frame": {(3, 10): "offsetof(PyThreadState, frame)", (3, 11): "offsetof(PyThreadState, cframe)",
                         (3, 12): "offsetof(PyThreadState, cframe)"}.get(v, "offsetof(PyThreadState, current_frame)"),
        "frame_code": f"offsetof({frame}, f_code)" if v < (3, 13) else f"offsetof({frame}, f_executable)",
        "frame_previous": f"offsetof({frame}, f_back)" if v < (3, 11) else f"offsetof({frame}, previous)",
        "frame_instr": {(3, 10): f"offsetof({frame}, f_lasti)", (3, 11): f"offsetof({frame}, prev_instr)",
                        (3, 12): f"offsetof({frame}, prev_instr)"}.get(v, f"offsetof({frame}, instr_ptr)"),
        "code_filename": "offsetof(PyCodeObject, co_filename)",
        "code_name": "offsetof(PyCodeObject, co_name)",
        "code_firstlineno": "offsetof(PyCodeObject, co_firstlineno)",
        "code_linetable": "offsetof(PyCodeObject, co_linetable)",
        "unicode_ascii_size": "sizeof(PyASCIIObject)",
        "unicode_compact_size": "sizeof(PyCompactUnicodeObject)",
        "object_type": "offsetof(PyObject, ob_type)",
        "unicode_length": "offsetof(PyASCIIObject, length)",
        "unicode_state": "offsetof(PyASCIIObject, state)",
        "bytes_size": "offsetof(PyVarObject, ob_size)",
        "bytes_data": "offsetof(PyBytesObject, ob_sval)",
    }
    if v >= (3, 11):
        f |= {
            "frame_owner": f"offsetof({frame}, owner)",
            "owner_generator": "FRAME_OWNED_BY_GENERATOR",
            "code_qualname": "offsetof(PyCodeObject, co_qualname)",
            "code_adaptive": "offsetof(PyCodeObject, co_code_adaptive)",
            "code_firsttraceable": "offsetof(PyCodeObject, _co_firsttraceable)",
        }
    if v == (3, 11):
        f["frame_is_entry"] = f"offsetof({frame}, is_entry)"
    if v in ((3, 11), (3, 12)):
        f["cframe_current"] = "offsetof(_PyCFrame, current_frame)"
    if v >= (3, 12):
        f["owner_shim"] = "FRAME_OWNED_BY_CSTACK"
    if v == (3, 10):
        f["code_bytecode"] = "offsetof(PyCodeObject, co_code)"
    return f


# Facts the walker relies on besides offsets: field sizes and the str state bits.
CHECKS = {
    "sizeof(((PyThreadState *)0)->thread_id)": 8,
    "sizeof(((PyObject *)0)->ob_type)": 8,
    "({ PyASCIIObject a = {0}; a.state.kind = 7; *(unsigned *)&a.state; })": 0x1C,
    "({ PyASCIIObject a = {0}; a.state.compact = 1; *(unsigned *)&a.state; })": 0x20,
    "({ PyASCIIObject a = {0}; a.state.ascii = 1; *(unsigned *)&a.state; })": 0x40,
}


def header_values(tmp: Path, inc: Path, version: tuple[int, int], exprs: list[str]) -> list[int]:
    frame_h = '"internal/pycore_frame.h"' if version >= (3, 11) else '"frameobject.h"'
    out = c_values(tmp, ["<Python.h>", '"internal/pycore_runtime.h"', '"internal/pycore_interp.h"', frame_h],
                   ["PY_VERSION_HEX >> 16", *exprs], include_dirs=[inc, inc / "internal"],
                   defines={"Py_BUILD_CORE": 1})
    assert out[0] == (version[0] << 8 | version[1]), "headers of another version"
    return out[1:]


def installed_layout(interp: Interpreter) -> PyLayout:
    """The table layout, or (3.13+) the one read from _Py_DebugOffsets in the interpreter's ELF."""
    if interp.version in LAYOUTS:
        return LAYOUTS[interp.version]
    assert interp.path is not None
    lib = interp.path.parent.parent / "lib" / f"libpython{interp.version[0]}.{interp.version[1]}.so.1.0"
    with ElfImage(str(lib if lib.exists() else interp.path.resolve())) as elf:
        sym = elf.symbol("_PyRuntime")
        assert sym is not None
        blob = elf.read_vaddr(sym[0], MAX_SIZE)
    assert blob is not None
    return layout_from_debug_offsets(parse_debug_offsets(blob))


@pytest.mark.parametrize("interp", INTERPRETERS, ids=lambda i: i.id)
def test_layout_matches_headers(tmp_path: Path, interp: Interpreter) -> None:
    if interp.path is None:
        pytest.skip(f"{interp.id} is not installed")
    inc = include_dir(interp)
    if inc is None:
        pytest.skip(f"no internal headers for {interp.id}")
    layout = installed_layout(interp)
    fields = c_fields(interp.version)
    got = header_values(tmp_path, inc, interp.version, list(fields.values()) + list(CHECKS))
    assert dict(zip(fields, got[: len(fields)], strict=True)) == {k: getattr(layout, k) for k in fields}
    assert got[len(fields):] == list(CHECKS.values())
    # what the layout leaves unset is what the version does not have
    unset = {k for k in PyLayout.__dataclass_fields__ if getattr(layout, k) is None}
    assert not unset & set(fields)


@pytest.mark.parametrize("version", sorted(LAYOUTS))
def test_walker_config_fits_its_buffers(version: tuple[int, int]) -> None:
    layout = LAYOUTS[version]
    layout.check()
    cfg = proc_config(layout)
    assert cfg.frame_size <= 128 and cfg.code_read_size <= 128
    for off in (cfg.frame_code, cfg.frame_previous, cfg.frame_instr, cfg.frame_owner, cfg.frame_is_entry):
        assert off + 8 <= 128
    assert cfg.code_firstlineno + 4 <= cfg.code_read_size and cfg.code_name + 8 <= cfg.code_read_size
    assert cfg.frame_instr + 8 <= cfg.frame_size


@pytest.mark.parametrize("version", sorted(LAYOUTS))
def test_the_thread_states_fields_are_read_in_one_go(version: tuple[int, int]) -> None:
    """The walker reads the thread state's id and frame fields in one read of fewer than PY_TSTATE_SPAN bytes."""
    layout = LAYOUTS[version]
    assert layout.tstate_span == abs(layout.tstate_ident - layout.tstate_frame) + 8 <= TSTATE_READ_MAX


def test_a_layout_whose_thread_state_fields_lie_far_apart_is_refused() -> None:
    far = dataclasses.replace(LAYOUTS[(3, 11)], tstate_ident=LAYOUTS[(3, 11)].tstate_frame + TSTATE_READ_MAX)
    with pytest.raises(ValueError, match="thread state's id and frame fields lie 263 bytes apart"):
        far.check()


def test_the_read_bound_matches_the_header(tmp_path: Path) -> None:
    assert c_values(tmp_path, ['"python_stack.h"'], ["PY_TSTATE_SPAN"]) == [TSTATE_READ_MAX + 1]
