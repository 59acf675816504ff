"""Findings in the terminal: each with its place, evidence, fix and estimated speedup; rules that could not
be evaluated say why."""

from __future__ import annotations

import os
import re
from typing import Any

from rich.console import Console
from rich.text import Text

from deepctx.cli.escape import printable_doc
from deepctx.cli.formats.units import fmt


def value_text(key: str, value: Any) -> str:
    """Evidence values with units: *_ns as times, byte counts as sizes, small objects compactly."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, int | float) and (key.endswith("_ns") or key in ("bytes", "mean_bytes", "bytes_read",
                                                                           "bytes_allocated")):
        unit = "api_time_ns" if key.endswith("_ns") else "bytes"
        return fmt(unit, int(value)) or "0"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {value_text(k, v)}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(value_text(key, v) if not isinstance(v, dict) else
                         " ".join(value_text(k, x) for k, x in v.items()) for v in value)
    return str(value)


_DIRS = re.compile(r"\((?:[^()]*/)([^/()]+:\d+)\)")


def short_path(frames: list[str]) -> str:
    """A call path with file names only: 'main (train.py:40) -> step (train.py:25)'."""
    return " -> ".join(_DIRS.sub(r"(\1)", f) for f in frames)


def where(loc: dict[str, Any]) -> str:
    if loc.get("file"):
        return f"{os.path.basename(loc['file'])}:{loc.get('line')} in {loc.get('function')}"
    return loc.get("function") or "(no location)"


def speedup_text(f: dict[str, Any]) -> str:
    s = f.get("estimated_speedup")
    return f"~{s:g}x" if isinstance(s, int | float) else "not estimated"


class FindingsText:
    """`deepctx analyze` (full) and the findings section of `deepctx report` (brief)."""

    def render(self, doc: dict[str, Any], console: Console, brief: bool = False) -> None:
        # findings quote function and file names of the target: escaped before they reach the terminal
        findings = printable_doc(doc.get("findings") or [])
        analysis = printable_doc(doc.get("analysis") or {})
        head = Text("findings", style="bold")
        if analysis.get("time_ns"):
            head.append(f"  (speedups relative to {fmt('api_time_ns', analysis['time_ns'])}: "
                        f"{analysis.get('time_source', '')}; device time: "
                        f"{(analysis.get('device_time') or {}).get('source', 'none')})", style="dim")
        console.print(head, overflow="fold")
        if not findings:
            console.print(Text("  no findings above the thresholds", style="dim"))
        for k, f in enumerate(findings, 1):
            self._finding(console, k, f, brief)
        skipped = [r for r in analysis.get("rules") or [] if r.get("status") == "not_evaluated"]
        if skipped:
            console.print(Text("not evaluated:", style="bold"))
            for r in skipped:
                console.print(Text(f"  {r['rule']}: {r.get('reason')}", style="dim"), overflow="fold")
        below = [r for r in analysis.get("rules") or [] if r.get("status") == "clear" and r.get("reason")]
        if below and not brief:
            console.print(Text("below the threshold:", style="bold"))
            for r in below:
                console.print(Text(f"  {r['rule']}: {r['reason']}", style="dim"), overflow="fold")

    def _finding(self, console: Console, k: int, f: dict[str, Any], brief: bool) -> None:
        line = Text(f"{k:>2}. ")
        line.append(f.get("rule", "?"), style="bold yellow")
        line.append(f"  {speedup_text(f)}", style="bold")
        if f.get("confidence") is not None:
            line.append(f"  confidence {f['confidence']:g}", style="dim")
        line.append(f"  {f.get('title', '')}")
        console.print(line, overflow="fold")
        loc = f.get("location") or {}
        at = Text("    at ", style="dim")
        at.append(where(loc), style="green")
        if loc.get("file") and at.cell_len + 2 + len(loc["file"]) <= console.width:
            at.append(f"  {loc['file']}", style="dim")  # where it fits: the basename above says where already
        console.print(at, overflow="fold")
        if brief:
            console.print(Text(f"    fix: {f.get('suggestion', '')}"), overflow="fold")
            return
        path = f.get("call_path") or []
        if len(path) > 1:
            console.print(Text("    via " + short_path(path), style="dim"), overflow="fold")
        ev = f.get("evidence") or {}
        console.print(Text("    evidence: " + "; ".join(f"{k} {value_text(k, v)}" for k, v in ev.items())),
                      overflow="fold")
        console.print(Text(f"    fix: {f.get('suggestion', '')}"), overflow="fold")
        if f.get("speedup_model"):
            console.print(Text(f"    model: {f['speedup_model']}", style="dim"), overflow="fold")
