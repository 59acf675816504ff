"""speedscope's file format (https://www.speedscope.app/file-format-schema.json): one sampled profile per
measured metric, each call path a sample weighted by its self value."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from deepctx.cli.formats.folded import folded_name
from deepctx.profiles.exporter import ExportOptions
from deepctx.profiles.metrics import METRIC_TITLES, METRIC_UNITS
from deepctx.profiles.tree import Frame, from_doc, iter_paths, nonzero_metrics

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"
UNITS = {"ns": "nanoseconds", "bytes": "bytes"}  # everything else is a count: "none"


class Speedscope:
    name: ClassVar[str] = "speedscope"
    suffix: ClassVar[str] = ".speedscope.json"
    binary: ClassVar[bool] = False

    def export(self, doc: dict[str, Any], options: ExportOptions) -> str:
        root = from_doc(doc, options.fold)
        metrics = [options.metric] if options.metric else (nonzero_metrics(root) or ["cpu_samples"])
        frames: list[dict[str, Any]] = []
        index: dict[tuple[Frame, int | None], int] = {}
        stacks: list[tuple[list[int], dict[str, int]]] = []
        for path, node in iter_paths(root):
            if not any(node.self.get(m, 0) for m in metrics):
                continue
            stack = []
            for n in path:
                key = (n.frame, n.tid if n.frame.kind == "thread" else None)
                i = index.get(key)
                if i is None:
                    i = index[key] = len(frames)
                    frames.append(_frame(n.frame, n.tid))
                stack.append(i)
            stacks.append((stack, node.self))
        profiles = []
        for m in metrics:
            chosen = [(s, v[m]) for s, v in stacks if v.get(m, 0)]
            total = sum(w for _, w in chosen)
            profiles.append({
                "type": "sampled",
                "name": f"{METRIC_TITLES.get(m, m)} ({m})",
                "unit": UNITS.get(METRIC_UNITS.get(m, ""), "none"),
                "startValue": 0,
                "endValue": total,
                "samples": [s for s, _ in chosen],
                "weights": [w for _, w in chosen],
            })
        out = {
            "$schema": SCHEMA_URL,
            "name": f"{doc.get('command', '')} (pid {doc.get('pid')})",
            "exporter": "deepctx",
            "activeProfileIndex": 0,
            "shared": {"frames": frames},
            "profiles": profiles,
        }
        return json.dumps(out, separators=(",", ":"))


def _frame(frame: Frame, tid: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": folded_name(frame, tid) if frame.kind != "python" else frame.name}
    if frame.file:
        out["file"] = frame.file
        if frame.line:
            out["line"] = frame.line
    elif frame.module:
        out["file"] = frame.module
    return out
