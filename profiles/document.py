"""The Profile message as the documented JSON document (docs/formats.md, schema deepctx.profile/v1)."""

from __future__ import annotations

from typing import Any

from deepctx.profiles.gpu_branches import branch_doc
from deepctx.proto.v1 import deepctx_pb2 as pb

SCHEMA = "deepctx.profile/v1"  # the document's `schema` (docs/formats.md, docs/profile.schema.json)

_TRACE_API = ("kind", "name", "tid", "start_ns", "dur_ns", "correlation")
_TRACE_DEVICE = ("kind", "name", "device", "stream", "start_ns", "dur_ns", "correlation", "bytes", "graph_node",
                 "tid")


_NODE_OPTIONAL = frozenset(("file", "line", "module", "tid", "stream", "registers", "static_shared"))


def trace_event(e: pb.TraceEvent) -> dict[str, Any]:
    """One event of the optional trace part (docs/device-activity.md)."""
    ev = {k: getattr(e, k) for k in (_TRACE_API if e.kind == "api" else _TRACE_DEVICE)}
    if e.at:
        ev["at"] = e.at
    return ev


def to_doc(p: pb.Profile) -> dict[str, Any]:
    metrics = list(p.metrics)
    nodes: list[dict[str, Any]] = []
    for n in p.nodes:
        node: dict[str, Any] = {"kind": n.kind, "name": n.name, "file": None, "line": None, "module": None,
                                "metrics": dict(zip(metrics, n.metrics, strict=True)), "children": []}
        for fd, value in n.ListFields():  # the fields set, in one call (not a HasField per optional field)
            name = fd.name
            if name in _NODE_OPTIONAL:
                node[name] = value
            elif name == "grid":
                node["grid"] = list(value)
                node["block"] = list(n.block)
                node["shared_mem"] = n.shared_mem
            elif name == "compiled_from":
                node["compiled_from"] = compiled_from_doc(value)
            elif name == "branches":
                node["branches"] = [branch_doc(b) for b in value]
        nodes.append(node)
        if n.parent >= 0:
            nodes[n.parent]["children"].append(node)
    doc = {
        "schema": p.schema,
        "pid": p.pid,
        "command": p.command,
        "hostname": p.hostname,
        "started_unix": p.started_unix,
        "duration_s": p.duration_s,
        "ended": p.ended,
        "sample_hz": p.sample_hz,
        "mode": p.mode or None,
        "metrics": metrics,
        "root": nodes[0] if nodes else None,
        "stats": {k: int(v) for k, v in sorted(p.stats.items())},
        "warnings": list(p.warnings),
    }
    if p.trace:
        doc["trace"] = [trace_event(e) for e in p.trace]
    if p.compiles:
        doc["compiles"] = [compile_doc(c) for c in p.compiles]
    device = device_part(doc["stats"])
    if device:
        doc["device"] = device
    return doc


def _line(s: pb.SourceLine) -> dict[str, Any]:
    return {"file": s.file, "line": s.line, "function": s.function, "code": s.code or None}


def compiled_from_doc(c: pb.CompiledFrom) -> dict[str, Any]:
    """A kernel node's `compiled_from` (docs/formats.md, "Compiled code")."""
    return {"lines": [_line(s) for s in c.lines], "nodes": list(c.nodes), "aten": list(c.aten),
            "compile_id": c.compile_id or None, "output_code": c.output_code, "framework": c.framework or "inductor",
            "bytes_per_launch": c.bytes_per_launch or None}


def compile_doc(c: pb.Compile) -> dict[str, Any]:
    """One entry of the optional `compiles` part."""
    return {"id": c.id, "function": c.function, "file": c.file, "line": c.line,
            "recompile_reason": c.recompile_reason or None, "fail_reason": c.fail_reason or None,
            "graph_breaks": [{"file": b.file, "line": b.line, "reason": b.reason} for b in c.graph_breaks],
            "time_s": c.time_s, "ops": c.ops,
            "called_from": _line(c.called_from) if c.HasField("called_from") else None,
            "start_unix": c.start_unix or None}


def device_part(stats: dict[str, int]) -> dict[str, Any] | None:
    """The optional `device` part: what the CUPTI agent read from the driver (PC-sampling captures), the
    multiprocessor count and the compute capability (major x 10 + minor in the stats); and the memory's peak
    bandwidth the daemon read from NVML (captures with device activity)."""
    sms = stats.get("device_sm_count", 0)
    bandwidth = stats.get("device_memory_bandwidth_mb_s", 0)
    if not sms and not bandwidth:
        return None
    out: dict[str, Any] = {"name": None}
    if sms:
        cc = stats.get("device_compute_capability", 0)
        out.update(sm_count=sms, compute_capability=f"{cc // 10}.{cc % 10}" if cc else None)
    if bandwidth:
        out["memory_bandwidth_gb_s"] = round(bandwidth / 1000, 1)
    return out
