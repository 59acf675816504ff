"""probes/python_stack.h is the truth: the loader's ctypes mirrors and constants must match it."""

from __future__ import annotations

import ctypes as ct
from pathlib import Path

import pytest
from c_layout import c_values, struct_layout

from deepctx.host.python import stacks
from deepctx.host.python.code import code_tag
from deepctx.probes import python_stack as ps

HEADER = '"python_stack.h"'


@pytest.mark.parametrize(
    ("c_name", "mirror"),
    [("py_proc", ps.PyProc), ("py_thread", ps.PyThread), ("py_frame", ps.PyFrame), ("py_new_stack", ps.PyNewStack),
     ("py_found_thread", ps.PyFoundThread)],
)
def test_struct_mirrors(tmp_path: Path, c_name: str, mirror: type[ct.Structure]) -> None:
    pairs = struct_layout(c_name, mirror)
    assert c_values(tmp_path, [HEADER], list(pairs)) == list(pairs.values())


@pytest.mark.parametrize("depth", [1, 128, 300, 1024])
def test_stack_mirror_at_each_depth(tmp_path: Path, depth: int) -> None:
    pairs = struct_layout("py_stack", ps.py_stack_type(depth))
    assert c_values(tmp_path, [HEADER], list(pairs), defines={"PY_MAX_DEPTH": depth}) == list(pairs.values())


def test_constants(tmp_path: Path) -> None:
    pairs = {
        "PY_NO_OFFSET": ps.PY_NO_OFFSET,
        "PY_RETRY_NS": ps.PY_RETRY_NS,
        "PY_SEARCH_RETRY_NS": ps.PY_SEARCH_RETRY_NS,
        "PY_SEARCH_MAX": ps.PY_SEARCH_MAX,
        "PY_MAX_DEPTH": 128,
        "PYSTACK_F_TRUNCATED": stacks.PYSTACK_F_TRUNCATED,
        "PYSTACK_F_TSTATE_MISS": stacks.PYSTACK_F_TSTATE_MISS,
        "PYSTACK_F_READ_ERROR": stacks.PYSTACK_F_READ_ERROR,
        "PYSTACK_F_MAP_FULL": stacks.PYSTACK_F_MAP_FULL,
        "PYFRAME_F_ENTRY": stacks.PYFRAME_F_ENTRY,
        "PYFRAME_F_GENERATOR": stacks.PYFRAME_F_GENERATOR,
        "PYSTACK_STAT_CAPTURES": ps.PYSTACK_STAT_CAPTURES,
        "PYSTACK_STAT_STACKS": ps.PYSTACK_STAT_STACKS,
        "PYSTACK_STAT_TSTATE_MISS": ps.PYSTACK_STAT_TSTATE_MISS,
        "PYSTACK_STAT_TRUNCATED": ps.PYSTACK_STAT_TRUNCATED,
        "PYSTACK_STAT_READ_ERROR": ps.PYSTACK_STAT_READ_ERROR,
        "PYSTACK_STAT_MAP_FULL": ps.PYSTACK_STAT_MAP_FULL,
        "PYSTACK_STAT_NEW_LOST": ps.PYSTACK_STAT_NEW_LOST,
        "PYSTACK_STAT_FOUND": ps.PYSTACK_STAT_FOUND,
        "PYSTACK_STAT_FOUND_LOST": ps.PYSTACK_STAT_FOUND_LOST,
        "PYSTACK_STAT_RAW_HITS": ps.PYSTACK_STAT_RAW_HITS,
        "PYSTACK_STAT_COUNT": ps.PYSTACK_STAT_COUNT,
    }
    assert c_values(tmp_path, [HEADER], list(pairs)) == list(pairs.values())
    assert set(ps.STAT_NAMES) == set(range(ps.PYSTACK_STAT_COUNT))


def test_code_tag_matches_c(tmp_path: Path) -> None:
    cases = [(0, 0), (1, 0x7F12_3456_7890), (12345, 0x5555_5555_4321), (0xFFFFFFFF, 0xFFFF_FFFF_FFFF_FFF0)]
    exprs = [f"py_code_tag({a}u, {b}ull)" for a, b in cases]
    assert c_values(tmp_path, [HEADER], exprs) == [code_tag(a, b) for a, b in cases]
