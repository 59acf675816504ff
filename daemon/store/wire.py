"""A profile document as the API's Profile message (the inverse of profiles/document.to_doc)."""

from __future__ import annotations

from typing import Any

from deepctx.profiles.gpu_branches import branch_message
from deepctx.proto.v1 import deepctx_pb2 as pb


def to_message(doc: dict[str, Any]) -> pb.Profile:
    metrics = list(doc.get("metrics") or [])
    msg = pb.Profile(schema=str(doc.get("schema") or ""), pid=int(doc.get("pid") or 0),
                     command=str(doc.get("command") or ""), duration_s=float(doc.get("duration_s") or 0.0),
                     metrics=metrics, sample_hz=int(doc.get("sample_hz") or 0), ended=str(doc.get("ended") or ""),
                     started_unix=float(doc.get("started_unix") or 0.0), hostname=str(doc.get("hostname") or ""),
                     mode=str(doc.get("mode") or ""))
    msg.stats.update({k: int(v) for k, v in (doc.get("stats") or {}).items() if isinstance(v, int)})
    msg.warnings.extend(str(w) for w in doc.get("warnings") or [])
    msg.compiles.extend(compile_message(c) for c in doc.get("compiles") or [])
    root = doc.get("root")
    if not isinstance(root, dict):
        return msg
    stack: list[tuple[dict[str, Any], int]] = [(root, -1)]  # preorder: parents before children
    while stack:
        node, parent = stack.pop()
        n = msg.nodes.add(parent=parent, kind=str(node.get("kind")), name=str(node.get("name")))
        for f in ("file", "module"):
            if node.get(f) is not None:
                setattr(n, f, str(node[f]))
        for f in ("line", "tid", "shared_mem", "stream", "registers", "static_shared"):
            if node.get(f) is not None:
                setattr(n, f, int(node[f]))
        if node.get("compiled_from"):
            n.compiled_from.CopyFrom(compiled_from_message(node["compiled_from"]))
        if node.get("branches"):
            n.branches.extend(branch_message(b) for b in node["branches"])
        if node.get("grid"):
            n.grid.extend(node["grid"])
            n.block.extend(node.get("block") or [])
        values = node.get("metrics") or {}
        n.metrics.extend(int(values.get(m, 0)) for m in metrics)
        index = len(msg.nodes) - 1
        for child in reversed(node.get("children") or []):
            stack.append((child, index))
    return msg


def _line(s: dict[str, Any]) -> pb.SourceLine:
    return pb.SourceLine(file=str(s.get("file") or ""), line=int(s.get("line") or 0),
                         function=str(s.get("function") or ""), code=str(s.get("code") or ""))


def compiled_from_message(c: dict[str, Any]) -> pb.CompiledFrom:
    """A kernel node's `compiled_from` (profiles/document.compiled_from_doc's inverse)."""
    return pb.CompiledFrom(lines=[_line(s) for s in c.get("lines") or []], nodes=list(c.get("nodes") or []),
                           aten=list(c.get("aten") or []), compile_id=str(c.get("compile_id") or ""),
                           output_code=str(c.get("output_code") or ""), framework=str(c.get("framework") or ""),
                           bytes_per_launch=int(c.get("bytes_per_launch") or 0))


def compile_message(c: dict[str, Any]) -> pb.Compile:
    """One entry of the `compiles` part (profiles/document.compile_doc's inverse)."""
    return pb.Compile(id=str(c.get("id") or ""), function=str(c.get("function") or ""), file=str(c.get("file") or ""),
                      line=int(c.get("line") or 0), recompile_reason=str(c.get("recompile_reason") or ""),
                      fail_reason=str(c.get("fail_reason") or ""),
                      graph_breaks=[pb.GraphBreak(file=str(b["file"]), line=int(b["line"]), reason=str(b["reason"]))
                                    for b in c.get("graph_breaks") or []],
                      time_s=float(c.get("time_s") or 0.0), ops=int(c.get("ops") or 0),
                      called_from=_line(c["called_from"]) if c.get("called_from") else None,
                      start_unix=float(c.get("start_unix") or 0.0))
