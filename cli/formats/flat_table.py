"""The flat view in the terminal: one row per function, sorted by self (or total) value."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from deepctx.cli.formats.terminal import (
    ViewOptions,
    footer,
    frame_text,
    header,
    is_ascii,
    layout,
    new_table,
    value_cells,
)
from deepctx.cli.views.flat import flat, sorted_rows
from deepctx.profiles.tree import ViewNode


class FlatTable:
    view = "flat"

    def __init__(self, self_time: str | None = None) -> None:
        self.self_time = self_time  # "python" or "native" (views/python_self.py); None: not said

    def render(self, doc: dict[str, Any], root: ViewNode, opts: ViewOptions, console: Console) -> None:
        what = {"python": ", self: innermost Python frame", "native": ", self: innermost frame"}.get(self.self_time or "", "")
        header(console, doc, root, f"flat (functions{what})", opts)
        lay = layout(opts, console.width)
        grand = root.total.get(opts.metric, 0)
        if grand == 0:
            console.print(Text(f"nothing measured for {opts.metric} in this view", style="dim"))
            return
        all_rows = sorted_rows(flat(root), opts.metric, opts.by)
        floor = grand * opts.min_percent / 100.0
        basis = "self" if opts.by == "self" else "total"
        shown = [r for r in all_rows if getattr(r, basis)[opts.metric] > 0 and getattr(r, basis)[opts.metric] >= floor]
        hidden = len(all_rows) - len(shown[:opts.limit])
        ascii_only = is_ascii(console)
        table = new_table(lay, opts)
        for r in shown[:opts.limit]:
            table.add_row(*value_cells(r.self, r.total, lay, opts, grand, ascii_only),
                          frame_text(r.frame, width=lay.name_width))
        console.print(table)
        if hidden:
            console.print(Text(f"({hidden} more functions: with nothing of {opts.metric}, below "
                               f"{opts.min_percent}%, or past --limit {opts.limit})", style="dim"))
        footer(console, lay, 0, opts)
