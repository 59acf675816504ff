"""CaptureResult -> the Profile message of the API (a flattened calling context tree)."""

from __future__ import annotations

from deepctx.daemon.capture import CaptureResult
from deepctx.daemon.label_stats import label_stats, label_warnings
from deepctx.daemon.tree import CallTree
from deepctx.host.compiled_sources import LaunchOrigin
from deepctx.host.torch_compile import Compile, SourceLine
from deepctx.profiles.document import SCHEMA
from deepctx.profiles.gpu_branches import branch_message
from deepctx.profiles.metrics import METRICS
from deepctx.proto.v1 import deepctx_pb2 as pb


def _metrics(tree: CallTree) -> list[str]:
    """METRICS, then the PC-sampling metrics the tree has (pc_samples, stall_*: only in captures that
    sampled PCs, whose stall reasons depend on the GPU)."""
    extra = {m for n in tree.nodes if n.frame.kind == "gpu_instruction" for m in n.metrics}
    return [*METRICS, *sorted(extra - set(METRICS), key=lambda m: (m != "pc_samples", m))]


def to_message(result: CaptureResult) -> pb.Profile:
    tree = result.tree
    metrics = _metrics(tree)
    msg = pb.Profile(
        schema=SCHEMA, pid=result.pid, command=result.command, duration_s=result.duration_s,
        metrics=metrics, sample_hz=result.sample_hz, ended=result.ended,
        started_unix=result.started_unix, hostname=result.hostname, mode=result.mode,
    )
    stats = {**result.stats, **label_stats(tree)}
    msg.stats.update(stats)
    msg.warnings.extend([*result.warnings, *label_warnings(stats)])
    # one add() with keyword fields per node, and a shared list of zeros for the many nodes with no self
    # value: a third faster than setting fields one by one on ResNet-50's 80k-node profiles
    zeros = [0] * len(metrics)
    index: dict[int, int] = {}
    add = msg.nodes.add
    nodes = tree.nodes
    for pos, idx in enumerate(tree.preorder()):
        node = nodes[idx]
        f = node.frame
        fields: dict = {"parent": index[node.parent] if node.parent >= 0 else -1, "kind": f.kind, "name": f.name}
        if f.file is not None:
            fields["file"] = f.file
        if f.line is not None:
            fields["line"] = f.line
        if f.module is not None:
            fields["module"] = f.module
        if f.tid is not None:
            fields["tid"] = f.tid
        if f.launch is not None:
            fields["grid"] = f.launch[:3]
            fields["block"] = f.launch[3:6]
            fields["shared_mem"] = f.launch[6]
        if f.stream is not None:
            fields["stream"] = f.stream
        if f.resources is not None:
            fields["registers"], fields["static_shared"] = f.resources
        facts = tree.facts.get(idx)
        if facts and "compiled_from" in facts:
            fields["compiled_from"] = compiled_from_message(facts["compiled_from"])
        if facts and "branches" in facts:
            fields["branches"] = [branch_message(b) for b in facts["branches"]]
        m = node.metrics
        fields["metrics"] = [m.get(name, 0) for name in metrics] if m else zeros
        add(**fields)
        index[idx] = pos
    for ev in result.trace:
        msg.trace.add(**ev)
    msg.compiles.extend(compile_message(c) for c in result.compiles)
    return msg


def _line(s: SourceLine) -> pb.SourceLine:
    return pb.SourceLine(file=s.file, line=s.line, function=s.function, code=s.code)


def compiled_from_message(o: LaunchOrigin) -> pb.CompiledFrom:
    return pb.CompiledFrom(lines=[_line(s) for s in o.lines], nodes=o.site.nodes, aten=o.site.aten,
                           compile_id=o.compile_id or "", output_code=o.wrapper, framework=o.framework,
                           bytes_per_launch=o.bytes_per_launch or 0)


def compile_message(c: Compile) -> pb.Compile:
    return pb.Compile(id=c.compile_id, function=c.function, file=c.file, line=c.line,
                      recompile_reason=c.recompile_reason or "", fail_reason=c.fail_reason or "",
                      graph_breaks=[pb.GraphBreak(file=b.file, line=b.line, reason=b.reason) for b in c.graph_breaks],
                      time_s=c.time_s, ops=c.ops, called_from=_line(c.called_from) if c.called_from else None,
                      start_unix=c.start_unix)
