"""Folded stacks (Brendan Gregg's flamegraph.pl input): `frame;frame;frame value`, one line per call path."""

from __future__ import annotations

from typing import Any, ClassVar

from deepctx.profiles.exporter import ExportOptions
from deepctx.profiles.tree import Frame, from_doc, iter_paths, pick_metric


def folded_name(frame: Frame, tid: int | None = None) -> str:
    """The frame as one folded-stack field: ';' separates frames and a newline ends the line, so neither
    may appear inside one (C++ names never hold them; they are replaced to be safe)."""
    if frame.kind == "thread":
        name = f"[thread] {frame.name}" + (f" ({tid})" if tid is not None else "")
    elif frame.kind == "python" and frame.file:
        name = f"{frame.name} ({frame.file}:{frame.line or 0})"
    elif frame.kind in ("python", "native"):
        name = frame.name
    else:
        name = f"{frame.name} [{frame.kind}]"
    return name.replace(";", ":").replace("\n", " ")


class FoldedStacks:
    name: ClassVar[str] = "folded"
    suffix: ClassVar[str] = ".folded"
    binary: ClassVar[bool] = False

    def export(self, doc: dict[str, Any], options: ExportOptions) -> str:
        root = from_doc(doc, options.fold)
        metric = pick_metric(root, options.metric)
        lines = []
        for path, node in iter_paths(root):
            v = node.self.get(metric, 0)
            if v:
                lines.append(";".join(folded_name(n.frame, n.tid) for n in path) + f" {v}")
        return "\n".join(lines) + ("\n" if lines else "")
