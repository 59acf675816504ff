"""XLA's optimized HLO modules as it dumps them (`XLA_FLAGS=--xla_dump_to=DIR`, text): each fusion's kernel name
and the Python lines of the operations fused into it.

A module's text starts with tables of the Python stacks JAX traced its operations from (FileNames,
FunctionNames, FileLocations, StackFrames: each frame a location and its caller, `parent_frame_id` one more than
the caller's id, 0 for none), then its computations; each instruction's `metadata={op_name="jit(f)/tanh"
stack_frame_id=N}` (older XLA: `source_file="..." source_line=N`) says where it came from. On a GPU a fusion
runs as a kernel named after the instruction, with `.` and `-` made `_` (`gemm_fusion_dot.1` ->
`gemm_fusion_dot_1`, as the H100 host's profiles name them). Parsed as text, never loaded."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from deepctx.host.frames import is_library_file
from deepctx.host.torch_compile import SourceLine

AFTER_OPTIMIZATIONS = re.compile(r"after_optimizations\.txt$")
_TABLE_ROW = re.compile(r"^(\d+) (.*)$")
_FIELDS = re.compile(r"(\w+)=(\d+)")
_COMPUTATION = re.compile(r"^(ENTRY )?%([\w.\-]+) .*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = \S+(?: \S+)*? ([\w\-]+)\(")
_CALLS = re.compile(r"calls=%([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_FRAME_ID = re.compile(r"stack_frame_id=(\d+)")
_SOURCE = re.compile(r'source_file="([^"]*)" source_line=(\d+)')
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def kernel_name(instruction: str) -> str:
    return re.sub(r"[.\-]", "_", instruction)


@dataclass(frozen=True)
class Fusion:
    """A fusion instruction: the module it is in, its JAX operations and their lines (the innermost frame of the
    user's own code of each)."""

    module: str
    instruction: str
    ops: tuple[str, ...]
    lines: tuple[SourceLine, ...]


@dataclass
class HloModule:
    name: str
    fusions: dict[str, Fusion] = field(default_factory=dict)  # by kernel name
    locations: set[tuple[str, int]] = field(default_factory=set)  # every (file, line) of its traced stacks


@dataclass
class _Instr:
    name: str
    opcode: str
    calls: str | None
    op_name: str | None
    where: SourceLine | None


def parse_module(text: str) -> HloModule | None:
    """An `*after_optimizations.txt` module, None for anything else."""
    first = text.split("\n", 1)[0]
    if not first.startswith("HloModule "):
        return None
    module = HloModule(first.split()[1].rstrip(","))
    tables: dict[str, dict[int, str]] = {t: {} for t in _TABLES}
    computations: dict[str, list[_Instr]] = {}
    table: str | None = None
    current: list[_Instr] | None = None
    frames: dict[int, tuple[int, int]] = {}  # stack frame id -> (location id, parent frame id or 0)
    where_of = _Locations(tables, frames)
    for line in text.split("\n")[1:]:
        if line in _TABLES:
            table = line
            continue
        if table is not None:
            m = _TABLE_ROW.match(line)
            if m:
                tables[table][int(m.group(1))] = m.group(2)
                continue
            table = None
            frames.update(where_of.frames())
        m = _COMPUTATION.match(line)
        if m:
            current = computations.setdefault(m.group(2), [])
            continue
        if line.startswith("}"):
            current = None
            continue
        if current is None:
            continue
        ins = _INSTRUCTION.match(line)
        if not ins:
            continue
        calls = _CALLS.search(line)
        op = _OP_NAME.search(line)
        current.append(_Instr(ins.group(1), ins.group(2), calls.group(1) if calls else None,
                              op.group(1) if op else None, where_of.line(line)))
    module.locations = where_of.all_locations()
    fused = {c for instrs in computations.values() for i in instrs if i.opcode == "fusion" and i.calls
             for c in [i.calls]}
    for comp, instrs in computations.items():
        if comp in fused:
            continue  # a fusion's body: its instructions belong to the fusion
        for i in instrs:
            if i.opcode != "fusion":
                continue
            body = _body(computations, i.calls, set())
            ops = tuple(dict.fromkeys(x.op_name for x in [i, *body] if x.op_name))
            lines = tuple(sorted({x.where for x in [i, *body] if x.where is not None}, key=lambda s: (s.file, s.line)))
            module.fusions[kernel_name(i.name)] = Fusion(module.name, i.name, ops, lines)
    return module


def _body(computations: dict[str, list[_Instr]], name: str | None, seen: set[str]) -> list[_Instr]:
    """A fused computation's instructions, nested fusions' included."""
    if name is None or name in seen:
        return []
    seen.add(name)
    out: list[_Instr] = []
    for i in computations.get(name, []):
        out.append(i)
        if i.calls:
            out.extend(_body(computations, i.calls, seen))
    return out


class _Locations:
    """The module's stack tables, as source lines."""

    def __init__(self, tables: dict[str, dict[int, str]], frames: dict[int, tuple[int, int]]) -> None:
        self.tables = tables
        self._frames = frames

    def frames(self) -> dict[int, tuple[int, int]]:
        out = {}
        for fid, row in self.tables["StackFrames"].items():
            f = dict((k, int(v)) for k, v in _FIELDS.findall(row))
            out[fid] = (f.get("file_location_id", 0), f.get("parent_frame_id", 0))
        return out

    def location(self, lid: int) -> SourceLine | None:
        row = self.tables["FileLocations"].get(lid)
        if row is None:
            return None
        f = dict((k, int(v)) for k, v in _FIELDS.findall(row))
        file = self.tables["FileNames"].get(f.get("file_name_id", 0), '""').strip('"')
        function = self.tables["FunctionNames"].get(f.get("function_name_id", 0), '""').strip('"')
        return SourceLine(file, f.get("line", 0), function, "") if file else None

    def stack(self, fid: int) -> list[SourceLine]:
        """A stack frame and its callers, innermost first (parent_frame_id is the caller's id + 1)."""
        out: list[SourceLine] = []
        seen: set[int] = set()
        while fid and fid not in seen and fid in self._frames:
            seen.add(fid)
            lid, parent = self._frames[fid]
            loc = self.location(lid)
            if loc is not None:
                out.append(loc)
            fid = parent - 1 if parent > 0 else 0
        return out

    def line(self, text: str) -> SourceLine | None:
        """An instruction's line: the innermost frame of the user's own code in its stack."""
        m = _FRAME_ID.search(text)
        if m:
            stack = self.stack(int(m.group(1)))
            return next((s for s in stack if not is_library_file(s.file)), stack[0] if stack else None)
        m = _SOURCE.search(text)
        return SourceLine(m.group(1), int(m.group(2)), "", "") if m else None

    def all_locations(self) -> set[tuple[str, int]]:
        return {(s.file, s.line) for lid in self.tables["FileLocations"] for s in [self.location(lid)] if s}
