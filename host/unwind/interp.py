"""Runs DW_CFA_* instructions into rows of rules, tracking only what unwinding needs.

A walker needs the CFA, the frame pointer and the return address: rules for other registers are
parsed (to keep the instruction stream in step) and dropped. A state is a hashable tuple
(cfa_reg, cfa_off, cfa_expr, fp_rule, ra_rule), so equal states compile to one table entry.
"""

from __future__ import annotations

from typing import NamedTuple

from deepctx.host.unwind.cfi import CfiError, read_sleb, read_uleb

# Register rule kinds (DWARF 5, 6.4.1). UNSET: no rule given (callee-saved: keeps its value).
UNSET, UNDEF, SAME, OFFSET, VAL_OFFSET, REGISTER, EXPR, VAL_EXPR = range(8)
Rule = tuple[int, object]  # (kind, offset | register | expression bytes)
RULE_UNSET: Rule = (UNSET, 0)


class State(NamedTuple):
    cfa_reg: int  # -1: no CFA rule yet
    cfa_off: int
    cfa_expr: bytes | None  # DW_CFA_def_cfa_expression, else None
    fp: Rule
    ra: Rule


EMPTY = State(-1, 0, None, RULE_UNSET, RULE_UNSET)

# (offset from the FDE's pc_begin, state from there on); states in rows are plain tuples (cheaper to
# make than State, and equal to it): State._make() gives the named view.
Row = tuple[int, State]


def run(
    code: bytes,
    init: State,
    cie_init: State,
    code_align: int,
    data_align: int,
    fp_reg: int,
    ra_reg: int,
) -> tuple[list[Row], State]:
    """Interprets code starting from init; DW_CFA_restore* go back to cie_init's rules.

    Returns the rows (first at offset 0) and the final state (for CIE initial instructions)."""
    cfa_reg, cfa_off, cfa_expr, fp, ra = init
    loc = 0
    rows: list[Row] = []
    stack: list[State] = []
    pos, n = 0, len(code)
    while pos < n:
        op = code[pos]
        pos += 1
        hi = op & 0xC0
        if hi == 0x40:  # DW_CFA_advance_loc
            rows.append((loc, (cfa_reg, cfa_off, cfa_expr, fp, ra)))  # type: ignore[arg-type]
            loc += (op & 0x3F) * code_align
            continue
        if hi == 0x80:  # DW_CFA_offset
            reg = op & 0x3F
            off = code[pos]
            pos += 1
            if off & 0x80:
                off, pos = read_uleb(code, pos - 1)
            if reg == fp_reg:
                fp = (OFFSET, off * data_align)
            elif reg == ra_reg:
                ra = (OFFSET, off * data_align)
            continue
        if hi == 0xC0:  # DW_CFA_restore
            reg = op & 0x3F
            if reg == fp_reg:
                fp = cie_init.fp
            elif reg == ra_reg:
                ra = cie_init.ra
            continue
        if op == 0x0E:  # def_cfa_offset
            cfa_off, pos = read_uleb(code, pos)
            cfa_expr = None
        elif op == 0x00:  # nop
            pass
        elif op == 0x0A:  # remember_state (the CFA is part of the row, as GCC and readelf assume)
            stack.append(State(cfa_reg, cfa_off, cfa_expr, fp, ra))
        elif op == 0x0B:  # restore_state
            if not stack:
                raise CfiError("DW_CFA_restore_state with an empty stack")
            cfa_reg, cfa_off, cfa_expr, fp, ra = stack.pop()
        elif op in (0x02, 0x03, 0x04):  # advance_loc1/2/4
            size = 1 << (op - 2)
            rows.append((loc, (cfa_reg, cfa_off, cfa_expr, fp, ra)))  # type: ignore[arg-type]
            loc += int.from_bytes(code[pos : pos + size], "little") * code_align
            pos += size
        elif op == 0x0C:  # def_cfa
            cfa_reg, pos = read_uleb(code, pos)
            cfa_off, pos = read_uleb(code, pos)
            cfa_expr = None
        elif op == 0x0D:  # def_cfa_register
            cfa_reg, pos = read_uleb(code, pos)
            cfa_expr = None
        elif op == 0x12:  # def_cfa_sf
            cfa_reg, pos = read_uleb(code, pos)
            cfa_off, pos = read_sleb(code, pos)
            cfa_off *= data_align
            cfa_expr = None
        elif op == 0x13:  # def_cfa_offset_sf
            cfa_off, pos = read_sleb(code, pos)
            cfa_off *= data_align
            cfa_expr = None
        elif op == 0x0F:  # def_cfa_expression
            size, pos = read_uleb(code, pos)
            cfa_expr = bytes(code[pos : pos + size])
            cfa_reg, cfa_off = -1, 0
            pos += size
        elif op in (
            0x05,
            0x11,
            0x14,
            0x15,
            0x2F,
        ):  # offset_extended(_sf), val_offset(_sf), GNU_negative_offset_extended
            reg, pos = read_uleb(code, pos)
            if op in (0x11, 0x15):
                off, pos = read_sleb(code, pos)
            else:
                off, pos = read_uleb(code, pos)
            off *= data_align
            if op == 0x2F:
                off = -off
            rule: Rule = (VAL_OFFSET if op in (0x14, 0x15) else OFFSET, off)
            if reg == fp_reg:
                fp = rule
            elif reg == ra_reg:
                ra = rule
        elif op in (0x06, 0x07, 0x08):  # restore_extended, undefined, same_value
            reg, pos = read_uleb(code, pos)
            if op == 0x06:
                rule = cie_init.fp if reg == fp_reg else cie_init.ra
            else:
                rule = (UNDEF if op == 0x07 else SAME, 0)
            if reg == fp_reg:
                fp = rule
            elif reg == ra_reg:
                ra = rule
        elif op == 0x09:  # register
            reg, pos = read_uleb(code, pos)
            other, pos = read_uleb(code, pos)
            if reg == fp_reg:
                fp = (REGISTER, other)
            elif reg == ra_reg:
                ra = (REGISTER, other)
        elif op in (0x10, 0x16):  # expression, val_expression
            reg, pos = read_uleb(code, pos)
            size, pos = read_uleb(code, pos)
            rule = (EXPR if op == 0x10 else VAL_EXPR, bytes(code[pos : pos + size]))
            pos += size
            if reg == fp_reg:
                fp = rule
            elif reg == ra_reg:
                ra = rule
        elif op == 0x2E:  # GNU_args_size
            _, pos = read_uleb(code, pos)
        elif op == 0x2D:  # GNU_window_save (SPARC) / AARCH64_negate_ra_state: no operands
            pass
        elif op == 0x01:  # set_loc: absolute, only meaningful with absptr encodings; unused by GCC/LLVM
            raise CfiError("DW_CFA_set_loc")
        else:
            raise CfiError(f"unknown DW_CFA opcode {op:#x}")
    if pos > n:
        raise CfiError("instruction runs past the end")
    final = State(cfa_reg, cfa_off, cfa_expr, fp, ra)
    rows.append((loc, final))
    return rows, final
