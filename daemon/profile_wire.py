"""CaptureResult -> the Profile message of the API (a flattened calling context tree)."""

from __future__ import annotations

from deepctx.daemon.capture import CaptureResult
from deepctx.daemon.tree import METRICS
from deepctx.proto.v1 import deepctx_pb2 as pb

SCHEMA = "deepctx.profile/v1"


def to_message(result: CaptureResult) -> pb.Profile:
    tree = result.tree
    msg = pb.Profile(
        schema=SCHEMA, pid=result.pid, command=result.command, duration_s=result.duration_s,
        metrics=list(METRICS), sample_hz=result.sample_hz, ended=result.ended,
        started_unix=result.started_unix, hostname=result.hostname, mode=result.mode,
    )
    msg.stats.update(result.stats)
    msg.warnings.extend(result.warnings)
    index: dict[int, int] = {}
    for idx in tree.preorder():
        node = tree.nodes[idx]
        f = node.frame
        n = msg.nodes.add()
        n.parent = index[node.parent] if node.parent >= 0 else -1
        n.kind = f.kind
        n.name = f.name
        if f.file is not None:
            n.file = f.file
        if f.line is not None:
            n.line = f.line
        if f.module is not None:
            n.module = f.module
        if f.tid is not None:
            n.tid = f.tid
        if f.launch is not None:
            n.grid.extend(f.launch[:3])
            n.block.extend(f.launch[3:6])
            n.shared_mem = f.launch[6]
        if f.stream is not None:
            n.stream = f.stream
        n.metrics.extend(node.metrics.get(m, 0) for m in METRICS)
        index[idx] = len(msg.nodes) - 1
    for ev in result.trace:
        msg.trace.add(**ev)
    return msg
