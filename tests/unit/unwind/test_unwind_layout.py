"""probes/native_unwind.h compiled by gcc against the Python side: struct sizes and offsets of the ctypes
mirrors, and every constant the table builder and the loader repeat."""

from __future__ import annotations

import shutil

import pytest
from c_layout import c_values, struct_layout

from deepctx.host.unwind import arch
from deepctx.probes import native_unwind as nu

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

DEPTH, MAPPINGS = 131, 256  # not the defaults: the -D settings must reach both sides

STRUCTS = {
    "native_unwind_row": nu.NativeUnwindRow,
    "native_unwind_info": nu.NativeUnwindInfo,
    "native_mapping": nu.NativeMapping,
    "native_regs": nu.NativeRegs,
    "native_unwind_counters": nu.NativeUnwindCounters,
    "native_proc": nu.native_proc_type(MAPPINGS),
    "native_stack": nu.native_stack_type(DEPTH),
}

CONSTANTS = {
    "NATIVE_CFA_NONE": arch.CFA_NONE,
    "NATIVE_CFA_SP": arch.CFA_SP,
    "NATIVE_CFA_FP": arch.CFA_FP,
    "NATIVE_CFA_PLT": arch.CFA_PLT,
    "NATIVE_CFA_DEREF_FP": arch.CFA_DEREF_FP,
    "NATIVE_CFA_END": arch.CFA_END,
    "NATIVE_CFA_UNSUPPORTED": arch.CFA_UNSUPPORTED,
    "NATIVE_FP_SAME": arch.FP_SAME,
    "NATIVE_FP_CFA": arch.FP_CFA,
    "NATIVE_FP_FP": arch.FP_FP,
    "NATIVE_FP_LOST": arch.FP_LOST,
    "NATIVE_RA_CFA": arch.RA_CFA,
    "NATIVE_RA_LR": arch.RA_LR,
    "NATIVE_F_TRUNCATED": nu.NATIVE_F_TRUNCATED,
    "NATIVE_F_NO_TABLE": nu.NATIVE_F_NO_TABLE,
    "NATIVE_F_READ_ERROR": nu.NATIVE_F_READ_ERROR,
    "NATIVE_F_UNSUPPORTED": nu.NATIVE_F_UNSUPPORTED,
    "NATIVE_F_NO_PROC": nu.NATIVE_F_NO_PROC,
    "NATIVE_F_COMPLETE": nu.NATIVE_F_COMPLETE,
    "NATIVE_F_BAD_FRAME": nu.NATIVE_F_BAD_FRAME,
    "NATIVE_F_KERNEL_REGS": nu.NATIVE_F_KERNEL_REGS,
    "NATIVE_STAT_COUNT": len(nu.STAT_NAMES),
    **{f"NATIVE_STAT_{name.upper()}": i for i, name in enumerate(nu.STAT_NAMES)},
}


def test_structs_and_constants_match_the_header(tmp_path):
    py: dict[str, int] = {}
    for cname, mirror in STRUCTS.items():
        py |= struct_layout(cname, mirror)
    py |= CONSTANTS
    c = dict(zip(py, c_values(tmp_path, ['"native_unwind.h"'], list(py), include_dirs=[nu.HEADER.parent],
                              defines={"NATIVE_MAX_DEPTH": DEPTH, "NATIVE_MAX_MAPPINGS": MAPPINGS}), strict=True))
    assert py == c


def test_flag_names_cover_every_flag():
    assert set(nu.FLAG_NAMES) == {v for k, v in CONSTANTS.items() if k.startswith("NATIVE_F_")}
