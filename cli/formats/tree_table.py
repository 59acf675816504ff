"""Top-down and bottom-up views in the terminal: a tree with self and total columns per metric."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from deepctx.cli.formats.terminal import (
    Guides,
    ViewOptions,
    footer,
    frame_text,
    header,
    is_ascii,
    layout,
    new_table,
    value_cells,
)
from deepctx.cli.views.topdown import rows
from deepctx.profiles.tree import ViewNode


class TreeTable:
    """Renders any ViewNode tree (top-down, bottom-up, focused) as rows with metric columns."""

    def __init__(self, view: str) -> None:
        self.view = view

    def render(self, doc: dict[str, Any], root: ViewNode, opts: ViewOptions, console: Console) -> None:
        header(console, doc, root, self.view, opts)
        lay = layout(opts, console.width)
        grand = root.total.get(opts.metric, 0)
        if grand == 0:
            console.print(Text(f"nothing measured for {opts.metric} in this view", style="dim"))
            return
        visible, hidden = rows(root, opts.metric, opts.by, opts.min_percent, opts.max_depth)
        ascii_only = is_ascii(console)
        guides = Guides(ascii_only, lay.name_width)
        table = new_table(lay, opts)
        for row in visible:
            n = row.node
            name = Text(guides.prefix(row.guides, row.last, row.depth), style="dim")
            name.append_text(frame_text(n.frame, n.tid, n.extra, lay.name_width - name.cell_len))
            table.add_row(*value_cells(n.self, n.total, lay, opts, grand, ascii_only), name)
        console.print(table)
        footer(console, lay, hidden, opts)
