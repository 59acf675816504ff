"""A profile document as the API's Profile message (the inverse of profiles/document.to_doc)."""

from __future__ import annotations

from typing import Any

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
        for f in ("line", "tid", "shared_mem", "stream"):
            if node.get(f) is not None:
                setattr(n, f, int(node[f]))
        if node.get("grid"):
            n.grid.extend(node["grid"])
            n.block.extend(node.get("block") or [])
        values = node.get("metrics") or {}
        n.metrics.extend(int(values.get(m, 0)) for m in metrics)
        index = len(msg.nodes) - 1
        for child in reversed(node.get("children") or []):
            stack.append((child, index))
    return msg
