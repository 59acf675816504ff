"""A SASS function's control flow (host/sass.py's instructions and labels): basic blocks, their successors, the
immediate post-dominator of each block, and the instructions on each side of a forward conditional branch
until the paths meet again (host/sass_uniformity.py classifies the branches)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from deepctx.host.sass import Instruction

_TARGET = re.compile(r"`\(([^)]+)\)")  # BRA `(.L_x_5)
EXIT_BLOCK = -1  # the virtual exit every EXIT and RET leads to


def opcode(text: str) -> str:
    """'@!P0 BRA `(.L_x_1)' -> 'BRA'; 'ISETP.GE.AND P0, ...' -> 'ISETP.GE.AND'."""
    parts = [p for p in text.split() if not p.startswith("@")]
    return parts[0] if parts else ""


def guard(text: str) -> str | None:
    """The instruction's predicate guard ('P0', '!P0'), None when it has none (or @PT)."""
    first = text.split(None, 1)[0] if text else ""
    return first[1:] if first.startswith("@") and first not in ("@PT", "@!PT") else None


def is_branch(op: str) -> bool:
    return op.split(".")[0] in ("BRA", "JMP")


def is_indirect(op: str) -> bool:
    return op.split(".")[0] in ("BRX", "JMX")


def ends_flow(op: str) -> bool:
    return op.split(".")[0] in ("EXIT", "RET", "KILL")


def target(ins: Instruction, labels: dict[str, int]) -> int | None:
    m = _TARGET.search(ins.text)
    return labels.get(m.group(1)) if m else None


@dataclass
class Cfg:
    instructions: list[Instruction]
    starts: list[int]  # each block's first instruction index, ascending
    succ: dict[int, list[int]]  # block -> successor blocks (EXIT_BLOCK for the exit)
    block_of: list[int]  # instruction index -> block
    indirect: bool  # an indirect branch (BRX, JMX): its targets, and what follows from them, are unknown

    def block_range(self, b: int) -> range:
        end = self.starts[b + 1] if b + 1 < len(self.starts) else len(self.instructions)
        return range(self.starts[b], end)

    def reachable(self, start: int, stop: int | None) -> set[int]:
        """Blocks reachable from block start without entering block stop."""
        seen: set[int] = set()
        todo = [start]
        while todo:
            b = todo.pop()
            if b == stop or b == EXIT_BLOCK or b in seen:
                continue
            seen.add(b)
            todo += self.succ[b]
        return seen


def build(instructions: list[Instruction], labels: dict[str, int]) -> Cfg:
    index = {ins.offset: i for i, ins in enumerate(instructions)}
    leaders = {0}
    indirect = False
    for i, ins in enumerate(instructions):
        op = opcode(ins.text)
        if is_branch(op) or is_indirect(op) or (ends_flow(op) and guard(ins.text) is None):
            leaders.add(i + 1)
        if is_branch(op):
            t = target(ins, labels)
            if t is not None and t in index:
                leaders.add(index[t])
        indirect |= is_indirect(op)
    starts = sorted(i for i in leaders if i < len(instructions))
    block_of = [0] * len(instructions)
    for b, s in enumerate(starts):
        end = starts[b + 1] if b + 1 < len(starts) else len(instructions)
        for i in range(s, end):
            block_of[i] = b
    succ: dict[int, list[int]] = {}
    for b in range(len(starts)):
        end = starts[b + 1] if b + 1 < len(starts) else len(instructions)
        last = instructions[end - 1]
        op = opcode(last.text)
        nxt = [block_of[end]] if end < len(instructions) else [EXIT_BLOCK]
        if is_branch(op):
            t = target(last, labels)
            to = [block_of[index[t]]] if t is not None and t in index else []
            succ[b] = to + (nxt if guard(last.text) is not None else [])
        elif is_indirect(op):
            succ[b] = []  # unknown targets: nothing is said beyond them
        elif ends_flow(op) and guard(last.text) is None:
            succ[b] = [EXIT_BLOCK]
        else:
            succ[b] = nxt
    return Cfg(instructions, starts, succ, block_of, indirect)


def post_dominators(cfg: Cfg) -> dict[int, int]:
    """Each block's immediate post-dominator (EXIT_BLOCK when only the exit post-dominates it), for the blocks
    reachable from the entry that reach the exit (Cooper, Harvey and Kennedy's iteration on the reversed
    graph)."""
    reach = cfg.reachable(0, None)
    pred: dict[int, list[int]] = {EXIT_BLOCK: []}  # predecessors in the reversed graph = successors
    for b in reach:
        pred[b] = [s for s in cfg.succ[b]]
    rsucc: dict[int, list[int]] = {b: [] for b in [*reach, EXIT_BLOCK]}
    for b in reach:
        for s in cfg.succ[b]:
            rsucc[s].append(b)
    order: list[int] = []  # postorder of the reversed graph from the exit
    seen = {EXIT_BLOCK}
    stack: list[tuple[int, int]] = [(EXIT_BLOCK, 0)]
    while stack:
        node, i = stack.pop()
        if i < len(rsucc[node]):
            stack.append((node, i + 1))
            nxt = rsucc[node][i]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, 0))
        else:
            order.append(node)
    rank = {b: i for i, b in enumerate(order)}
    ipdom: dict[int, int] = {EXIT_BLOCK: EXIT_BLOCK}

    def meet(a: int, b: int) -> int:
        while a != b:
            while rank[a] < rank[b]:
                a = ipdom[a]
            while rank[b] < rank[a]:
                b = ipdom[b]
        return a

    changed = True
    while changed:
        changed = False
        for b in reversed(order):
            if b == EXIT_BLOCK:
                continue
            done = [s for s in pred[b] if s in ipdom]
            if not done:
                continue
            new = done[0]
            for s in done[1:]:
                new = meet(new, s)
            if ipdom.get(b) != new:
                ipdom[b] = new
                changed = True
    del ipdom[EXIT_BLOCK]
    return ipdom


@dataclass(frozen=True)
class Region:
    """A forward conditional branch's two paths until they meet: the instruction offsets only one side runs."""
    taken: tuple[int, ...]
    fallthrough: tuple[int, ...]
    reconverge: int | None  # the offset where the paths meet (None: only at the exit)


def region(cfg: Cfg, branch: int, labels: dict[str, int], ipdom: dict[int, int]) -> Region | None:
    """The sides of the conditional branch at instruction index branch (None: not a forward conditional BRA
    with a known target, or its block does not reach the exit)."""
    ins = cfg.instructions[branch]
    t = target(ins, labels)
    if guard(ins.text) is None or t is None or t <= ins.offset or branch + 1 >= len(cfg.instructions):
        return None
    b = cfg.block_of[branch]
    if b not in ipdom:
        return None
    join = ipdom[b]
    stop = None if join == EXIT_BLOCK else join
    index = {i.offset: n for n, i in enumerate(cfg.instructions)}
    taken = cfg.reachable(cfg.block_of[index[t]], stop)
    fall = cfg.reachable(cfg.block_of[branch + 1], stop)

    def offsets(blocks: set[int]) -> tuple[int, ...]:
        return tuple(sorted(cfg.instructions[i].offset for x in blocks for i in cfg.block_range(x)))

    return Region(offsets(taken - fall), offsets(fall - taken),
                  None if stop is None else cfg.instructions[cfg.starts[stop]].offset)
