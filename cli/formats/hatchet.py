"""Hatchet's literal format (llnl-hatchet: GraphFrame.from_literal): nested {frame, metrics, children}.

Every node carries every metric twice: `M` (self) and `M (inc)` (inclusive), the naming Hatchet uses to
tell exclusive from inclusive metrics.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from deepctx.profiles.exporter import ExportOptions
from deepctx.profiles.tree import ViewNode, from_doc


class HatchetLiteral:
    name: ClassVar[str] = "hatchet"
    suffix: ClassVar[str] = ".hatchet.json"
    binary: ClassVar[bool] = False

    def export(self, doc: dict[str, Any], options: ExportOptions) -> str:
        root = from_doc(doc, options.fold)
        metrics = [options.metric] if options.metric else list(root.total)
        return json.dumps([self._tree(root, metrics)], separators=(",", ":"))

    def _tree(self, root: ViewNode, metrics: list[str]) -> dict[str, Any]:
        out = self._node(root, metrics)
        stack = [(root, out)]
        while stack:  # iterative: profile trees can be deeper than Python's recursion limit
            vn, d = stack.pop()
            for c in vn.children:
                cd = self._node(c, metrics)
                d["children"].append(cd)
                stack.append((c, cd))
        return out

    def _node(self, n: ViewNode, metrics: list[str]) -> dict[str, Any]:
        frame: dict[str, Any] = {"name": n.frame.name, "type": n.frame.kind}
        for key in ("file", "line", "module"):
            value = getattr(n.frame, key)
            if value is not None:
                frame[key] = value
        if n.tid is not None:
            frame["tid"] = n.tid
        values: dict[str, Any] = {}
        for m in metrics:
            values[m] = n.self.get(m, 0)
            values[f"{m} (inc)"] = n.total.get(m, 0)
        return {"frame": frame, "metrics": values, "children": []}
