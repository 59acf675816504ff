"""Per-architecture facts, and compiling generic CFI states into the walker's compact rules.

The compact rule ("info") mirrors struct native_unwind_info in probes/native_unwind.h:
(cfa_rule, cfa_param, cfa_off, fp_rule, fp_off, ra_rule, ra_off).
"""

from __future__ import annotations

from dataclasses import dataclass

from deepctx.host.elf import reader as elf
from deepctx.host.unwind.cfi import read_sleb
from deepctx.host.unwind.interp import EXPR, OFFSET, SAME, UNDEF, UNSET, State

# Mirrors of native_unwind.h (a unit test checks they agree).
CFA_NONE, CFA_SP, CFA_FP, CFA_PLT, CFA_DEREF_FP, CFA_END, CFA_UNSUPPORTED = range(7)
FP_SAME, FP_CFA, FP_FP, FP_LOST = range(4)
RA_CFA, RA_LR = range(2)

Info = tuple[int, int, int, int, int, int, int]
INFO_NONE: Info = (CFA_NONE, 0, 0, FP_SAME, 0, RA_CFA, 0)
INFO_UNSUPPORTED: Info = (CFA_UNSUPPORTED, 0, 0, FP_SAME, 0, RA_CFA, 0)

_DW_OP_LIT0, _DW_OP_BREG0 = 0x30, 0x70
_DW_OP_DEREF, _DW_OP_AND, _DW_OP_GE, _DW_OP_SHL, _DW_OP_PLUS = 0x06, 0x1A, 0x2A, 0x24, 0x22


@dataclass(frozen=True)
class Arch:
    name: str
    sp_reg: int  # DWARF register numbers
    fp_reg: int
    ra_reg: int  # the return address column
    pc_reg: int  # register an expression uses for the current pc (-1: none)


# x86-64 psABI: rbp = 6, rsp = 7, return address column 16 (rip).
X86_64 = Arch("x86_64", sp_reg=7, fp_reg=6, ra_reg=16, pc_reg=16)
# AAPCS64: x29 = frame pointer, x30 = link register (also the return address column), sp = 31.
# The BPF walker does not run on arm64 yet: it would need lr in native_regs (RA_LR) and PAC stripping.
AARCH64 = Arch("aarch64", sp_reg=31, fp_reg=29, ra_reg=30, pc_reg=-1)


def arch_for_machine(machine: int) -> Arch:
    if machine == elf.EM_X86_64:
        return X86_64
    if machine == elf.EM_AARCH64:
        return AARCH64
    raise ValueError(f"unsupported ELF machine {machine}")


def _breg(expr: bytes, pos: int, reg: int) -> tuple[int, int] | None:
    """(offset, next position) if expr[pos] is DW_OP_breg<reg>."""
    if reg < 0 or reg > 31 or pos >= len(expr) or expr[pos] != _DW_OP_BREG0 + reg:
        return None
    return read_sleb(expr, pos + 1)


def _cfa_expression(expr: bytes, arch: Arch) -> tuple[int, int, int]:
    """(rule, param, offset) for the two CFA expressions compilers emit on x86-64."""
    try:
        # PLT stubs: CFA = rsp + K + ((rip & 15) >= T) << 3   (T = 11 for .plt, 10 for .plt.sec)
        sp = _breg(expr, 0, arch.sp_reg)
        if sp is not None:
            k, pos = sp
            pc = _breg(expr, pos, arch.pc_reg)
            if pc is not None and pc[0] == 0:
                tail = expr[pc[1] :]
                if (
                    len(tail) == 7
                    and tail[0] == _DW_OP_LIT0 + 15
                    and tail[1] == _DW_OP_AND
                    and _DW_OP_LIT0 <= tail[2] < _DW_OP_LIT0 + 16
                    and tail[3:] == bytes([_DW_OP_GE, _DW_OP_LIT0 + 3, _DW_OP_SHL, _DW_OP_PLUS])
                ):
                    return CFA_PLT, tail[2] - _DW_OP_LIT0, k
        # Stack realignment (gcc's DRAP): CFA = *(rbp + K)
        fp = _breg(expr, 0, arch.fp_reg)
        if fp is not None and fp[1] == len(expr) - 1 and expr[-1] == _DW_OP_DEREF:
            return CFA_DEREF_FP, 0, fp[0]
    except IndexError:
        pass
    return CFA_UNSUPPORTED, 0, 0


def _fits(value: int, bits: int) -> bool:
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))


def compile_state(state: State, arch: Arch) -> Info:
    """The compact rule for a CFI state (see native_unwind.h for the meaning of each field)."""
    ra_kind, ra_val = state.ra
    if ra_kind == UNDEF:
        return (CFA_END, 0, 0, FP_SAME, 0, RA_CFA, 0)
    if ra_kind == OFFSET and isinstance(ra_val, int) and _fits(ra_val, 16):
        ra_rule, ra_off = RA_CFA, ra_val
    elif ra_kind in (UNSET, SAME) and arch.ra_reg != arch.pc_reg:
        ra_rule, ra_off = RA_LR, 0  # arm64 at function entry: the return address is still in x30
    else:
        return INFO_UNSUPPORTED

    if state.cfa_expr is not None:
        cfa_rule, cfa_param, cfa_off = _cfa_expression(state.cfa_expr, arch)
    elif state.cfa_reg == arch.sp_reg:
        cfa_rule, cfa_param, cfa_off = CFA_SP, 0, state.cfa_off
    elif state.cfa_reg == arch.fp_reg:
        cfa_rule, cfa_param, cfa_off = CFA_FP, 0, state.cfa_off
    else:
        return INFO_UNSUPPORTED
    if cfa_rule == CFA_UNSUPPORTED or not _fits(cfa_off, 32):
        return INFO_UNSUPPORTED

    fp_kind, fp_val = state.fp
    fp_rule, fp_off = FP_SAME, 0
    if fp_kind in (UNSET, SAME):
        pass
    elif fp_kind == OFFSET and isinstance(fp_val, int) and _fits(fp_val, 16):
        fp_rule, fp_off = FP_CFA, fp_val
    elif fp_kind == EXPR and isinstance(fp_val, bytes):
        b = _breg(fp_val, 0, arch.fp_reg)
        if b is not None and b[1] == len(fp_val) and _fits(b[0], 16):
            fp_rule, fp_off = FP_FP, b[0]
        else:
            fp_rule = FP_LOST
    else:
        fp_rule = FP_LOST
    return (cfa_rule, cfa_param, cfa_off, fp_rule, fp_off, ra_rule, ra_off)
