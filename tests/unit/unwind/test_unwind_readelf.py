"""The table builder against binutils' readelf on real files: at the first and last pc of every row
readelf prints, and just past every FDE, the compact rule must be exactly what readelf's rules imply."""

from __future__ import annotations

import glob
import re
import shutil
from pathlib import Path

import pytest
from unwind_readelf import Fde, read_frames

from deepctx.host.unwind.arch import (
    CFA_DEREF_FP,
    CFA_END,
    CFA_FP,
    CFA_PLT,
    CFA_SP,
    FP_CFA,
    FP_FP,
    FP_LOST,
    FP_SAME,
    INFO_NONE,
    INFO_UNSUPPORTED,
    RA_CFA,
    Info,
)
from deepctx.host.unwind.table import build_table

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf")

_PLT = re.compile(
    r"DW_OP_breg7 \(rsp\): (-?\d+); DW_OP_breg16 \(rip\): 0; DW_OP_lit15; DW_OP_and; DW_OP_lit(\d+); "
    r"DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus"
)
_DRAP = re.compile(r"DW_OP_breg6 \(rbp\): (-?\d+); DW_OP_deref")
_AT_RBP = re.compile(r"DW_OP_breg6 \(rbp\): (-?\d+)")
_REG_OFF = re.compile(r"(\w+)([+-]\d+)")


def expected(fde: Fde, cols: dict[str, str]) -> Info | None:
    """The compact rule readelf's columns imply; None where readelf's text is ambiguous."""
    ra = cols.get("ra")
    if ra == "u":
        return (CFA_END, 0, 0, FP_SAME, 0, RA_CFA, 0)
    if ra != "c-8":
        return INFO_UNSUPPORTED
    cfa = cols["CFA"]
    m = _REG_OFF.fullmatch(cfa)
    if m and m.group(1) in ("rsp", "rbp"):
        cfa_rule, param, off = (CFA_SP if m.group(1) == "rsp" else CFA_FP), 0, int(m.group(2))
    elif cfa == "exp":
        if len(fde.cfa_exprs) != 1:
            return None
        (text,) = fde.cfa_exprs
        if (p := _PLT.fullmatch(text)) is not None:
            cfa_rule, param, off = CFA_PLT, int(p.group(2)), int(p.group(1))
        elif (d := _DRAP.fullmatch(text)) is not None:
            cfa_rule, param, off = CFA_DEREF_FP, 0, int(d.group(1))
        else:
            return INFO_UNSUPPORTED
    else:
        return INFO_UNSUPPORTED
    rbp = cols.get("rbp")
    if rbp is None or rbp == "s" or (rbp == "u" and not fde.rbp_undefined):
        fp_rule, fp_off = FP_SAME, 0
    elif rbp == "u":
        return None  # undefined somewhere in this FDE: readelf cannot tell which 'u' is which
    elif re.fullmatch(r"c[+-]\d+", rbp):
        fp_rule, fp_off = FP_CFA, int(rbp[1:])
    elif rbp == "exp" and len(fde.rbp_exprs) == 1 and (a := _AT_RBP.fullmatch(next(iter(fde.rbp_exprs)))):
        fp_rule, fp_off = FP_FP, int(a.group(1))
    else:
        fp_rule, fp_off = FP_LOST, 0
    return (cfa_rule, param, off, fp_rule, fp_off, RA_CFA, -8)


def _files() -> list[str]:
    found = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libffi.so.8",
        *sorted(glob.glob("/root/.pyenv/versions/3.1[1-3].*/lib/libpython3.*.so.1.0")),
    ]
    return [f for f in found if Path(f).exists()]


def check_against_readelf(path: str) -> int:
    table = build_table(path)
    fdes = sorted(read_frames(path), key=lambda f: f.begin)
    assert fdes, f"readelf found no FDEs in {path}"
    checked = 0
    mismatches: list[str] = []
    for i, fde in enumerate(fdes):
        rows = [(loc, cols) for loc, cols in fde.rows if fde.begin <= loc < fde.end]
        for j, (loc, cols) in enumerate(rows):
            want = expected(fde, cols)
            if want is None:
                continue
            last = (rows[j + 1][0] if j + 1 < len(rows) else fde.end) - 1
            for pc in {loc, last}:
                got = table.rule_at(pc)
                checked += 1
                if got != want:
                    mismatches.append(
                        f"{pc:#x} in FDE {fde.begin:#x}..{fde.end:#x}: readelf {cols} -> {want}, table {got}"
                    )
        # just past the FDE, unless another FDE starts there: no rule (frame pointer fallback)
        nxt = fdes[i + 1].begin if i + 1 < len(fdes) else None
        if nxt is None or nxt > fde.end:
            checked += 1
            if table.rule_at(fde.end) != INFO_NONE:
                mismatches.append(
                    f"{fde.end:#x} after FDE {fde.begin:#x}: table {table.rule_at(fde.end)}, want none"
                )
    assert not mismatches, f"{len(mismatches)} of {checked} pcs differ in {path}, e.g.\n" + "\n".join(
        mismatches[:20]
    )
    return checked


@pytest.mark.parametrize("path", _files())
def test_system_library_matches_readelf(path):
    assert check_against_readelf(path) > 500


def test_target_matches_readelf(unwind_targets):
    # the test executable has a DRAP function and a .debug_frame-only function; the .so calls qsort
    for name in ("unwind_target", "libunwlib.so"):
        assert check_against_readelf(str(unwind_targets / name)) > 10
