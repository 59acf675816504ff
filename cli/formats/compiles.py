"""torch.compile's compiles under the tree: each recompile with its cause, each graph break with its place and
reason (the profile's `compiles` part, docs/formats.md)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from deepctx.cli.escape import printable


def _where(file: str, line: int) -> str:
    return f"{printable(file.rsplit('/', 1)[-1])}:{line}"


def render_compiles(doc: dict[str, Any], console: Console) -> None:
    compiles = doc.get("compiles") or []
    if not compiles:
        return
    recompiles = [c for c in compiles if c["recompile_reason"]]
    breaks = [(c, b) for c in compiles for b in c["graph_breaks"]]
    total = sum(c["time_s"] for c in compiles)
    console.print(Text(f"torch.compile: {len(compiles)} compiles ({total:.1f} s), {len(recompiles)} recompiles, "
                       f"{len(breaks)} graph breaks", style="bold"))
    for c in compiles:
        head = f"  {printable(str(c['id']))}  {printable(c['function'])} ({_where(c['file'], c['line'])})"
        if c["called_from"]:
            head += f" called at {_where(c['called_from']['file'], c['called_from']['line'])}"
        console.print(Text(head + f"  {c['time_s']:.1f} s, {c['ops']} ops"))
        if c["recompile_reason"]:
            console.print(Text(f"      recompiled: {printable(c['recompile_reason'])}", style="yellow"))
        if c["fail_reason"]:
            console.print(Text(f"      failed: {printable(c['fail_reason'])}", style="red"))
        for b in c["graph_breaks"]:
            console.print(Text(f"      graph break at {_where(b['file'], b['line'])}: {printable(b['reason'])}",
                               style="yellow"))
