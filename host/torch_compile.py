"""What torch.compile leaves on disk, read back: the Python lines each generated kernel came from, and why the
program compiled again or broke its graph.

Two sources, both written by PyTorch itself:
- Inductor's wrapper module (the "output code", `<cache>/xx/c<hash>.py`): its `call` function launches every
  kernel of a compiled graph, each launch after a comment naming the graph's source nodes and the ATen
  operators fused into it (`# Topologically Sorted Source Nodes: [x, relu], Original ATen: [aten.addmm, ...]`).
  A launch's Python call path holds this module's line, so the line names the launch's nodes.
- The structured trace (`TORCH_TRACE=DIR`, a `dedicated_log_torch_trace_*.log`): Dynamo's graph with a
  `# File: model.py:41 in forward, code: ...` comment above the nodes each source line made, which output code
  belongs to which compile, each compile's recompile reason, and each graph break's place and reason.

Neither is imported nor executed: both are parsed as text (the files are the target's)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# Inductor names its modules by a code hash: "c" and 51 base-32 characters (torch/_inductor/codecache.py)
WRAPPER_FILE = re.compile(r"(^|/)c[a-z0-9]{51}\.py$")
_SITE = re.compile(r"^\s*# Topologically Sorted Source Nodes: \[(.*?)\], Original ATen: \[(.*?)\]\s*$")
_LAUNCH = re.compile(r"\.run\(|extern_kernels\.|\bkernel\d*\(|torch\.ops\.")
_FILE = re.compile(r"^\s*# File: (.+?):(\d+) in (\S+), code: (.*)$")
_NODE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)(?:: \"[^\"]*\")? = ")
_BREAK_AT = re.compile(r"Graph break in user code at (.+):(\d+)")
MAX_TRACE_BYTES = 64 << 20


def is_wrapper_file(filename: str) -> bool:
    return bool(WRAPPER_FILE.search(filename))


@dataclass(frozen=True)
class LaunchSite:
    """A launch in a wrapper's `call`: the graph's source nodes and the ATen operators it fused."""

    nodes: tuple[str, ...]
    aten: tuple[str, ...]


def is_backward_wrapper(text: str) -> bool:
    """Inductor's first line names the graph: `# AOT ID: ['0_backward']`."""
    first = text.split("\n", 1)[0]
    return first.startswith("# AOT ID:") and "_backward" in first


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def parse_wrapper(text: str) -> dict[int, LaunchSite]:
    """Line number (1-based) -> the site of each launch that follows a source-nodes comment: the lines from the
    comment down to the first launch statement (or the next comment), since the statements between them
    (`stream0 = get_raw_stream(0)`) are the launch's preparation."""
    sites: dict[int, LaunchSite] = {}
    current: LaunchSite | None = None
    for number, line in enumerate(text.splitlines(), 1):
        m = _SITE.match(line)
        if m:
            current = LaunchSite(_names(m.group(1)), _names(m.group(2)))
            continue
        stripped = line.strip()
        if current is None or not stripped:
            continue
        if stripped.startswith("#") or stripped.startswith("'''") or "async_compile." in stripped:
            current = None  # a kernel's definition block, not a launch in `call`
            continue
        sites[number] = current
        if _LAUNCH.search(stripped):
            current = None
    return sites


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int
    function: str
    code: str


@dataclass
class GraphBreak:
    file: str
    line: int
    reason: str


@dataclass
class Compile:
    """One Dynamo compile of a frame (`compile_id` "frame/attempt" as PyTorch numbers them: "0/1" is frame 0's
    second compile, a recompile)."""

    compile_id: str
    function: str = ""
    file: str = ""
    line: int = 0
    recompile_reason: str | None = None
    fail_reason: str | None = None
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    time_s: float = 0.0
    ops: int = 0
    called_from: SourceLine | None = None
    start_unix: float = 0.0  # when the compile began (0: not recorded)


# The graphs whose node names a wrapper's source nodes use: a forward wrapper names Dynamo's graph's nodes and
# AOT's forward graph's (saved for backward: `le`); a backward wrapper names AOT's backward graph's, whose
# `# File:` comments are the forward lines each gradient differentiates.
GRAPHS = ("dynamo_output_graph", "aot_forward_graph", "aot_backward_graph")
_LOOKUP = {False: ("dynamo_output_graph", "aot_forward_graph"), True: ("aot_backward_graph", "dynamo_output_graph")}


@dataclass
class CompileTrace:
    """What a structured trace says: each compile's graphs' nodes by name, which output code it made, its
    metrics."""

    # (compile id, graph) -> node -> line
    nodes: dict[tuple[str, str], dict[str, SourceLine]] = field(default_factory=dict)
    output_code: dict[str, str] = field(default_factory=dict)  # output code file -> compile id
    compiles: dict[str, Compile] = field(default_factory=dict)
    pid: int | None = None  # the writer's pid, from its records' glog prefix (as the process saw it)

    def lines(self, wrapper: str, site: LaunchSite, backward: bool = False) -> list[SourceLine]:
        """The model's lines of a launch site in the output code `wrapper` (a backward graph's when `backward`),
        in line order; empty when the trace does not know that output code."""
        cid = self.output_code.get(wrapper)
        if cid is None:
            return []
        found: set[SourceLine] = set()
        for n in site.nodes:
            for graph in _LOOKUP[backward]:
                line = self.nodes.get((cid, graph), {}).get(n)
                if line is not None:
                    found.add(line)
                    break
        return sorted(found, key=lambda s: (s.file, s.line))


def _records(text: str) -> list[tuple[dict, str]]:
    """The trace's records: each a glog-prefixed JSON line, then its payload lines (each starts with a tab)."""
    out: list[tuple[dict, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        j = line.find("] {")
        if line.startswith("\t") or j < 0:
            continue
        try:
            head = json.loads(line[j + 2:])
        except ValueError:
            continue
        payload = []
        while i < len(lines) and lines[i].startswith("\t"):
            payload.append(lines[i][1:])
            i += 1
        if isinstance(head, dict):
            out.append((head, "\n".join(payload)))
    return out


_GLOG = re.compile(r"^[VIWE]\d{4} \d\d:\d\d:\d\d\.\d+ (\d+) ", re.MULTILINE)


def writer_pid(text: str) -> int | None:
    """The pid in a trace record's glog prefix ('V1205 16:11:24.253000 2708 torch/...'): the writing process."""
    m = _GLOG.search(text)
    return int(m.group(1)) if m else None


def _compile_id(head: dict) -> str:
    return f"{head.get('frame_id', '?')}/{head.get('frame_compile_id', '?')}"


def graph_nodes(graph: str) -> dict[str, SourceLine]:
    """A readable FX graph's nodes -> the source line in the `# File:` comment above them."""
    out: dict[str, SourceLine] = {}
    where: SourceLine | None = None
    for line in graph.splitlines():
        m = _FILE.match(line)
        if m:
            where = SourceLine(m.group(1), int(m.group(2)), m.group(3), m.group(4).strip())
            continue
        if not line.strip():
            where = None
            continue
        n = _NODE.match(line)
        if n and where is not None:
            out[n.group(1)] = where
    return out


def _stack_line(entry: str) -> SourceLine | None:
    """'Line: 32, Name: <module>, Filename: /work/x.py' (compilation_metrics' stack_trace)."""
    m = re.match(r"Line: (\d+), Name: (.*?), Filename: (.*)$", entry)
    return SourceLine(m.group(3), int(m.group(1)), m.group(2), "") if m else None


def complete_part(data: bytes) -> int:
    """How many bytes of a trace that is still being written hold whole records: up to the start of its last
    record (whose payload lines may still be coming). Records start with glog's level letter."""
    last = max(data.rfind(b"\n" + level) for level in (b"V", b"I", b"W", b"E"))
    return last + 1 if last >= 0 else 0


def parse_trace(text: str, is_library: object = None, into: CompileTrace | None = None) -> CompileTrace:
    """A structured trace's compiles (added to `into`, a trace read so far, when given). is_library(file) ->
    bool picks, of a compile's stack, the frames that are not the user's (PyTorch's own); the innermost other
    frame outside the compiled function is where it was called from."""
    trace = into if into is not None else CompileTrace()
    if trace.pid is None:
        trace.pid = writer_pid(text)
    for head, payload in _records(text):
        graph = next((g for g in GRAPHS if g in head), None)
        if graph is not None:
            trace.nodes[(_compile_id(head), graph)] = graph_nodes(payload)
        elif "inductor_output_code" in head:
            meta = head["inductor_output_code"] or {}
            name = meta.get("filename") or meta.get("file_path")
            if name:
                trace.output_code[name] = _compile_id(head)
        elif "compilation_metrics" in head:
            m = head["compilation_metrics"] or {}
            cid = m.get("compile_id") or _compile_id(head)
            c = trace.compiles.setdefault(cid, Compile(cid))
            c.function = m.get("co_name") or ""
            c.file = m.get("co_filename") or ""
            c.line = int(m.get("co_firstlineno") or 0)
            c.recompile_reason = m.get("recompile_reason")
            c.fail_reason = m.get("fail_reason")
            c.time_s = float(m.get("entire_frame_compile_time_s") or 0.0)
            c.ops = int(m.get("graph_op_count") or 0)
            c.start_unix = float(m.get("start_time") or 0.0)
            stack = [s for s in (_stack_line(e) for e in m.get("stack_trace") or []) if s is not None]
            callers = [s for s in stack[:-1] if not (callable(is_library) and is_library(s.file))]
            c.called_from = callers[-1] if callers else None
        elif head.get("artifact", {}).get("name") == "dynamo_graph_break_reason":
            m = _BREAK_AT.search(payload)
            if m:
                reason = _break_reason(payload)
                cid = _compile_id(head)
                c = trace.compiles.setdefault(cid, Compile(cid))
                c.graph_breaks.append(GraphBreak(m.group(1), int(m.group(2)), reason))
    return trace


def _break_reason(payload: str) -> str:
    """The graph break's explanation, one line: 'Dynamo does not know how to trace builtin operator `print` ...'."""
    for line in payload.splitlines():
        s = line.strip()
        if s.startswith("Explanation:"):
            return s.removeprefix("Explanation:").strip()
    for line in payload.splitlines():
        s = line.strip()
        if s.startswith("Graph Break Reason:"):
            return s.removeprefix("Graph Break Reason:").strip()
    return payload.splitlines()[1].strip() if len(payload.splitlines()) > 1 else ""
