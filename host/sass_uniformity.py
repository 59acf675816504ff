"""Which conditional branches of a SASS function split a warp (GPA's data-flow idea): a forward data flow over
the function's blocks marks each register and predicate lane-varying, warp-uniform or unknown, and each
conditional branch (`@P0 BRA`, a predicated EXIT, a loop's backward BRA) gets its predicate's class, where its
per-lane value comes from ('(SR_TID.X & 0x1) != 0x1') and, for a forward branch, the instructions on each side
until the paths meet (host/sass_cfg.py).

Uniform: constants (c[..][..], immediates, RZ, PT), uniform registers (UR*, UP*: one per warp by construction),
SR_CTAID.*, SR_NCTAID.*, and what is computed from uniform values only (a load through a uniform address
included). Lane-varying: SR_TID.X, SR_LANEID, SR_LANEMASK_*, shuffles, atomics' results, loads through
lane-varying addresses, and anything computed from them; a value written on one side of a lane-varying branch
(or in a loop whose exit is lane-varying) where the paths meet. The key case, `tid.x >> k` with k >= 5 (or
tid.x masked to bits 5 and up), and SR_TID.Y/Z, are warp-uniform only when blockDim.x is a multiple of 32 (a
warp's 32 consecutive thread ids then share them): block_x says so; unknown when it is None, lane-varying
when it is not a multiple. Unknown: local memory (per-thread), registers a call may have written, what the
analysis does not model. Conservative: 'unknown' is never reported as 'uniform'."""

from __future__ import annotations

import re
from dataclasses import dataclass

from deepctx.host import sass_cfg
from deepctx.host.sass import Instruction

UNIFORM, UNKNOWN, VARYING = 0, 1, 2
LANES = ("uniform", "unknown", "varying")
MAX_INSTRUCTIONS = 50_000  # a larger function is not analysed (its branches: unknown)
MAX_EXPR = 80
_REG = re.compile(r"^!?-?\|?(R\d+|RZ|P[0-6T]|UR\d+|URZ|UP[0-6T])")
_ANY_REG = re.compile(r"(?<![\w.])(R\d+|P[0-6]|UR\d+|UP[0-6])(?![\w])")
_PRED = re.compile(r"^P[0-6T]$")
_NO_DEST = ("ST", "RED", "BRA", "BRX", "JMP", "JMX", "EXIT", "RET", "CALL", "BSSY", "BSYNC", "BAR", "WARPSYNC",
            "NOP", "MEMBAR", "FENCE", "ERRBAR", "CCTL", "YIELD", "BPT", "DEPBAR", "KILL", "NANOSLEEP")
_LANE_SRS = ("SR_LANEID", "SR_LANEMASK", "SR_CLOCK", "SR_GLOBALTIMER")
_UNIFORM_SRS = ("SR_CTAID", "SR_NCTAID", "SR_SMID", "SR_VIRTUALSMID", "SR_GRIDID", "SR_WARPID", "SR_NWARPID",
                "SRZ", "SR_SWINHI", "SR_CgaCtaId")
_VARYING_OPS = ("SHFL", "ATOM", "MATCH", "HMMA", "IMMA", "DMMA", "HGMMA", "LDSM", "FRND.SAT")  # per-lane results
_UNIFORM_OPS = ("VOTE", "REDUX")  # one value for the warp's active lanes
_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "NEU": "!=", "EQU": "==",
        "LTU": "<", "LEU": "<=", "GTU": ">", "GEU": ">="}


@dataclass(frozen=True)
class Value:
    lanes: int  # UNIFORM, UNKNOWN, VARYING
    expr: str  # where its per-lane value comes from, in source-like terms
    tid_x: bool = False  # exactly SR_TID.X (so >> 5 or & ~31 of it is one value per warp)


CONST = Value(UNIFORM, "")


def join(a: Value, b: Value) -> Value:
    if a == b:
        return a
    hi = a if a.lanes >= b.lanes else b
    return Value(hi.lanes, hi.expr, a.tid_x and b.tid_x)


@dataclass(frozen=True)
class Branch:
    offset: int
    text: str
    file: str | None
    line: int | None
    kind: str  # "branch" (forward conditional BRA), "loop" (backward conditional BRA), "exit" (predicated EXIT)
    predicate: str  # "P0", "!P0"
    lanes: str  # "varying", "uniform", "unknown"
    source: str  # the predicate's value in terms of its sources ('(SR_TID.X & 0x1) != 0x1'), "" if uniform
    region: sass_cfg.Region | None  # forward branches: each side's instructions until the paths meet


def _operands(text: str) -> list[str]:
    """The operands, split at top-level commas ('desc[UR4][R2.64]' stays one)."""
    body = " ".join(p for p in text.split() if not p.startswith("@"))
    rest = body.split(None, 1)[1] if " " in body else ""
    out, depth, cur = [], 0, ""
    for ch in rest:
        depth += ch in "[(" and 1 or (ch in "])" and -1) or 0
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _dests(op: str, operands: list[str]) -> tuple[list[str], int]:
    """The registers and predicates an instruction writes, and how many leading operands name them: the first
    operand; two for the compares, PLOP3 and a LOP3 with a predicate result (P0, RZ); else the plain predicates
    right after the first (IADD3's and LEA's carries)."""
    base = op.split(".")[0]
    if not operands or base.startswith(_NO_DEST) or not _REG.match(operands[0]):
        return [], 0
    regs = [m.group(1) if (m := _REG.match(o)) else "" for o in operands]
    if base.endswith("SETP") or base == "PLOP3" or (base == "LOP3" and _PRED.match(regs[0])):
        n = 2
    else:
        n = 1
        while n < len(operands) and _PRED.match(regs[n]) and not operands[n].startswith("!"):
            n += 1
    out = regs[:n]
    wide = 4 if ".128" in op else 2 if ".64" in op or op.startswith("IMAD.WIDE") else 1
    if wide > 1 and out[0].startswith("R") and out[0] != "RZ":
        first = int(out[0][1:])
        out[1:1] = [f"R{first + k}" for k in range(1, wide)]
    return [d for d in out if d and d not in ("RZ", "PT", "URZ", "UPT")], n


def _short(s: str) -> str:
    return s if len(s) <= MAX_EXPR else s[:MAX_EXPR - 3] + "..."


class _Flow:
    def __init__(self, ins: list[Instruction], block_x: int | None) -> None:
        self.ins = ins
        self.warp_aligned = (UNKNOWN if block_x is None else UNIFORM if block_x % 32 == 0 else VARYING)

    def read(self, state: dict[str, Value], operand: str) -> Value:
        """An operand's value: the registers it names (an address's too), joined."""
        o = operand.lstrip("!-|").rstrip("|")
        m = re.match(r"^(R\d+|P[0-6])(?:\.reuse|\.64|\.H[01]|\.B\d)*$", o)
        if m:
            return state.get(m.group(1), Value(UNKNOWN, m.group(1)))
        regs = [r for r in _ANY_REG.findall(o) if not r.startswith("U")]
        v = CONST
        for r in regs:
            v = join(v, state.get(r, Value(UNKNOWN, r)))
        return v

    def step(self, state: dict[str, Value], i: int) -> None:
        """state after instruction i."""
        ins = self.ins[i]
        op = sass_cfg.opcode(ins.text)
        base = op.split(".")[0]
        ops = _operands(ins.text)
        if base == "CALL":  # a callee may write any register
            for k in list(state):
                state[k] = Value(UNKNOWN, f"{k} after the call at {ins.offset:#06x}")
            return
        dests, n = _dests(op, ops)
        if not dests:
            return
        srcs = ops[n:]
        value = self.evaluate(state, ins, op, base, srcs)
        g = sass_cfg.guard(ins.text)
        for d in dests:
            if d.startswith("U"):
                state[d] = Value(UNIFORM, d)
                continue
            new = value
            if base == "LOP3" and _PRED.match(d):  # a LOP3's predicate: its result is not 0
                new = Value(value.lanes, _short(f"({value.expr}) != 0") if value.expr else "")
            if g is not None:  # lanes whose guard is false keep the old value
                gv = self.read(state, g)
                new = join(join(new, state.get(d, Value(UNKNOWN, d))), gv)
            state[d] = new

    def evaluate(self, state: dict[str, Value], ins: Instruction, op: str, base: str, srcs: list[str]) -> Value:
        if base in ("S2R", "CS2R", "S2UR"):
            sr = srcs[-1] if srcs else ""
            if base == "S2UR" or sr.startswith(_UNIFORM_SRS):
                return Value(UNIFORM, sr)
            if sr == "SR_TID.X":
                return Value(VARYING, "SR_TID.X", tid_x=True)
            if sr.startswith(("SR_TID.Y", "SR_TID.Z")):
                return Value(self.warp_aligned, sr)
            if sr.startswith(_LANE_SRS):
                return Value(VARYING, sr)
            return Value(UNKNOWN, sr)
        if base.startswith(_UNIFORM_OPS):
            return Value(UNIFORM, base)
        if base.startswith(_VARYING_OPS):
            return Value(VARYING, f"{base} at {ins.offset:#06x}")
        if base == "LDL" or base.startswith("LDL"):
            return Value(UNKNOWN, f"local memory at {ins.offset:#06x}")
        vals = [self.read(state, s) for s in srcs]
        v = CONST
        for x in vals:
            v = join(v, x)
        if v.lanes == UNIFORM:
            return Value(UNIFORM, _short(self.expression(op, base, srcs, vals)))
        if base.startswith("LD"):  # a load through a lane-varying address
            return Value(v.lanes, f"the {op} at {ins.offset:#06x} (a per-lane address)")
        if base == "MOV" or op.startswith("IMAD.MOV"):
            return vals[-1]
        warp = self.warp_part(op, base, srcs, vals)
        if warp is not None:
            return warp
        return Value(v.lanes, _short(self.expression(op, base, srcs, vals)))

    def warp_part(self, op: str, base: str, srcs: list[str], vals: list[Value]) -> Value | None:
        """tid.x >> k (k >= 5) or tid.x & mask (no bit under 32): one value per warp when warps are aligned."""
        tids = [k for k, x in enumerate(vals) if x.tid_x]
        rest_uniform = all(x.lanes == UNIFORM for k, x in enumerate(vals) if k not in tids)
        if len(tids) != 1 or not rest_uniform:
            return None
        if base == "SHF" and ".R." in op and len(srcs) == 3 and tids == [2] and srcs[0] == "RZ":
            k = _imm(srcs[1])
            if k is not None and k >= 5:
                return Value(self.warp_aligned, f"SR_TID.X >> {k}")
        if base == "LOP3" and ".LUT" in op and len(srcs) >= 5:
            lut, masks = _imm(srcs[3]), [_imm(s) for k, s in enumerate(srcs[:3]) if k not in tids and s != "RZ"]
            if lut == 0xC0 and len(masks) == 1 and masks[0] is not None and masks[0] & 31 == 0:
                return Value(self.warp_aligned, f"SR_TID.X & {masks[0]:#x}")
        return None

    def expression(self, op: str, base: str, srcs: list[str], vals: list[Value]) -> str:
        def e(k: int) -> str:
            if k >= len(srcs):
                return "?"
            x = vals[k]
            return f"({x.expr})" if x.lanes != UNIFORM and x.expr and " " in x.expr else x.expr or srcs[k]

        parts = op.split(".")
        if base in ("LDC", "ULDC") and srcs:
            return srcs[0]
        if base.endswith("SETP") and len(parts) > 1 and parts[1] in _CMP and len(srcs) >= 2:
            text = f"{e(0)} {_CMP[parts[1]]} {e(1)}"
            if len(srcs) > 2 and srcs[2] not in ("PT", "!PT") and parts[-1] in ("AND", "OR", "XOR"):
                text += f" {parts[-1].lower()} {srcs[2][0] if srcs[2][0] == '!' else ''}{e(2)}"
            return text
        if base == "LOP3" and len(srcs) >= 5:
            sym = {0xC0: "&", 0xFC: "|", 0x3C: "^"}.get(_imm(srcs[3]) or -1)
            if sym:
                return f"{e(0)} {sym} {e(1)}"
        if base == "SHF" and len(srcs) == 3:
            return f"{e(2)} {'>>' if '.R' in op else '<<'} {srcs[1]}"
        if base in ("IADD3", "IADD", "VIADD", "FADD"):
            return " + ".join(e(k) for k, s in enumerate(srcs) if s != "RZ" and not _PRED.match(s.lstrip("!")))
        if base in ("IMAD", "FFMA") and len(srcs) >= 3:
            return f"{e(0)} * {e(1)} + {e(2)}"
        if base in ("FMUL", "IMUL"):
            return f"{e(0)} * {e(1)}"
        varying = next((k for k, x in enumerate(vals) if x.lanes != UNIFORM), 0)
        return f"{base}({e(varying)})"


def _imm(s: str) -> int | None:
    try:
        return int(s, 0)
    except ValueError:
        return None


def analyze(instructions: list[Instruction], labels: dict[str, int], block_x: int | None) -> list[Branch]:
    """The function's conditional branches and predicated EXITs, classified (block_x: the launch's blockDim.x,
    None when unknown)."""
    if not instructions:
        return []
    cfg = sass_cfg.build(instructions, labels)
    conditional = [i for i, x in enumerate(instructions)
                   if sass_cfg.guard(x.text) is not None
                   and (sass_cfg.is_branch(op := sass_cfg.opcode(x.text)) or sass_cfg.ends_flow(op))]
    if len(instructions) > MAX_INSTRUCTIONS or cfg.indirect:
        return [_branch(instructions[i], i, cfg, labels, {}, Value(UNKNOWN, "not analysed")) for i in conditional]
    ipdom = sass_cfg.post_dominators(cfg)
    flow = _Flow(instructions, block_x)
    taint: dict[int, set[str]] = {}  # block -> registers that differ per lane there (written on one side)
    while True:
        states = _fixpoint(cfg, flow, taint)
        preds = {i: _predicate(flow, states, cfg, i) for i in conditional}
        new = _taints(cfg, labels, ipdom, preds)
        if new == taint:
            break
        taint = new
    return [_branch(instructions[i], i, cfg, labels, ipdom, preds[i]) for i in conditional]


def _fixpoint(cfg: sass_cfg.Cfg, flow: _Flow, taint: dict[int, set[str]]) -> dict[int, dict[str, Value]]:
    """Each reachable block's state at its entry."""
    ins_state: dict[int, dict[str, Value]] = {0: {}}
    todo = [0]
    while todo:
        b = todo.pop()
        state = dict(ins_state[b])
        for r in taint.get(b, ()):
            old = state.get(r, Value(UNKNOWN, r))
            state[r] = Value(VARYING, old.expr or f"{r} (set on one side of a lane-varying branch)")
        for i in cfg.block_range(b):
            flow.step(state, i)
        for s in cfg.succ[b]:
            if s == sass_cfg.EXIT_BLOCK:
                continue
            old = ins_state.get(s)
            merged = state if old is None else _merge(old, state)
            if old is None or merged != old:
                ins_state[s] = merged
                todo.append(s)
    return ins_state


def _merge(a: dict[str, Value], b: dict[str, Value]) -> dict[str, Value]:
    out = dict(a)
    for k, v in b.items():
        out[k] = join(out[k], v) if k in out else Value(max(v.lanes, UNKNOWN), v.expr)
    for k in a.keys() - b.keys():
        out[k] = Value(max(a[k].lanes, UNKNOWN), a[k].expr)  # undefined on the other path
    return out


def _predicate(flow: _Flow, states: dict[int, dict[str, Value]], cfg: sass_cfg.Cfg, i: int) -> Value:
    b = cfg.block_of[i]
    if b not in states:
        return Value(UNKNOWN, "unreachable")
    state = dict(states[b])
    for k in range(cfg.starts[b], i):
        flow.step(state, k)
    g = sass_cfg.guard(cfg.instructions[i].text) or "PT"
    v = flow.read(state, g)
    return Value(v.lanes, v.expr, v.tid_x)


def _taints(cfg: sass_cfg.Cfg, labels: dict[str, int], ipdom: dict[int, int],
            preds: dict[int, Value]) -> dict[int, set[str]]:
    """Where the registers written under a lane-varying branch differ per lane: at the blocks where its paths
    meet, and after a loop whose exit is lane-varying."""
    out: dict[int, set[str]] = {}
    for i, v in preds.items():
        if v.lanes != VARYING:
            continue
        ins = cfg.instructions[i]
        b = cfg.block_of[i]
        t = sass_cfg.target(ins, labels)
        if not sass_cfg.is_branch(sass_cfg.opcode(ins.text)) or t is None:
            continue
        tb = cfg.block_of[next(k for k, x in enumerate(cfg.instructions) if x.offset == t)]
        if t > ins.offset:
            join_block = ipdom.get(b, sass_cfg.EXIT_BLOCK)
            stop = None if join_block == sass_cfg.EXIT_BLOCK else join_block
            a = cfg.reachable(tb, stop)
            f = cfg.reachable(cfg.block_of[i + 1], stop) if i + 1 < len(cfg.instructions) else set()
            written = _written(cfg, a | f)
            for x in ({stop} if stop is not None else set()) | (a & f):
                out.setdefault(x, set()).update(written)
        elif i + 1 < len(cfg.instructions):
            loop = {x for x in range(tb, b + 1)}
            out.setdefault(cfg.block_of[i + 1], set()).update(_written(cfg, loop))
    return out


def _written(cfg: sass_cfg.Cfg, blocks: set[int]) -> set[str]:
    out: set[str] = set()
    for x in blocks:
        for k in cfg.block_range(x):
            text = cfg.instructions[k].text
            op = sass_cfg.opcode(text)
            out.update(d for d in _dests(op, _operands(text))[0] if not d.startswith("U"))
    return out


def _branch(ins: Instruction, i: int, cfg: sass_cfg.Cfg, labels: dict[str, int], ipdom: dict[int, int],
            v: Value) -> Branch:
    op = sass_cfg.opcode(ins.text)
    t = sass_cfg.target(ins, labels)
    kind = "exit" if sass_cfg.ends_flow(op) else "loop" if t is not None and t <= ins.offset else "branch"
    region = sass_cfg.region(cfg, i, labels, ipdom) if kind == "branch" and ipdom else None
    return Branch(ins.offset, ins.text, ins.file, ins.line, kind, sass_cfg.guard(ins.text) or "",
                  LANES[v.lanes], v.expr if v.lanes != UNIFORM else "", region)
