"""deepctx diff in the terminal: GPU activity by kernel, then call paths, with what changed."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from deepctx.cli.escape import printable
from deepctx.cli.formats.terminal import NAME_KEEP, frame_need, frame_text, is_ascii, metric_title
from deepctx.cli.formats.units import fmt, fmt_signed
from deepctx.cli.views.diff import DiffNode, kernel_changes, kernel_metric, path_changes
from deepctx.profiles.metrics import METRIC_TITLES
from deepctx.profiles.tree import Frame

STATUS_STYLE = {"appeared": "bold red", "grew": "red", "shrank": "green", "vanished": "bold green", "same": "dim"}


def path_text(path: tuple[Frame, ...], keep: int, ascii_only: bool, width: int | None = None) -> Text:
    """Innermost frame first, then its callers outwards; frames past keep are counted, not hidden. With a
    width, the innermost frame shortens as frame_text does and callers come only while they fit, so
    nothing is cut mid-word; the count of the others comes where it fits."""
    sep = " <- " if ascii_only else " ← "
    inner = list(reversed(path[-keep:]))

    def marker(shown: int) -> str:
        return f"{sep}[{len(path) - shown} more]" if len(path) > shown else ""

    first_room = None
    if width is not None:  # the count beside the innermost frame, where the frame keeps its name whole
        first_room = width - cell_len(marker(1))
        if first_room < frame_need(inner[0]._replace(module=None)):
            first_room = width
    text = frame_text(inner[0]._replace(module=None), width=first_room)
    shown = 1
    for f in inner[1:]:
        piece = frame_text(f._replace(module=None))
        if width is not None:  # a caller shortens as frame_text does, down to NAME_KEEP cells of its name
            room = width - text.cell_len - cell_len(sep) - cell_len(marker(shown + 1))
            if piece.cell_len > room:
                piece = frame_text(f._replace(module=None), width=room)
            if room < NAME_KEEP or piece.cell_len > room:
                break
        text.append(sep, style="dim")
        text.append_text(piece)
        shown += 1
    more = marker(shown)
    if more and (width is None or text.cell_len + cell_len(more) <= width):
        text.append(more, style="dim")
    return text


class DiffTables:
    def render(self, before: dict[str, Any], after: dict[str, Any], root: DiffNode, metric: str, limit: int,
               console: Console, paths: bool = True) -> None:
        """paths=False leaves out the raw call path table (deepctx diff shows diff_changes.py's instead)."""
        ascii_only = is_ascii(console)
        arrow = "->" if ascii_only else "→"
        console.print(Text(f"before: {printable(str(before.get('command')))} (pid {before.get('pid')}, "
                           f"{before.get('duration_s', 0):.2f} s)", style="bold"), overflow="fold")
        console.print(Text(f"after:  {printable(str(after.get('command')))} (pid {after.get('pid')}, "
                           f"{after.get('duration_s', 0):.2f} s)", style="bold"), overflow="fold")
        totals = Text("totals: ", style="dim")
        for m in root.after_total:
            b, a = root.before_total.get(m, 0), root.after_total.get(m, 0)
            if a or b:
                totals.append(f"{metric_title(m)} {fmt(m, b, ascii_only) or 0} {arrow} "
                              f"{fmt(m, a, ascii_only) or 0}; ")
        console.print(totals, overflow="fold")
        self._kernels(root, limit, console, ascii_only)
        if paths:
            self._paths(root, metric, limit, console, ascii_only)

    def _kernels(self, root: DiffNode, limit: int, console: Console, ascii_only: bool) -> None:
        changes = kernel_changes(root)
        if not changes:
            return
        km = kernel_metric(root)
        console.print(Text(f"\nGPU activity by kernel (compared by {METRIC_TITLES.get(km, km)})", style="bold"))
        t = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False)  # the last column pads nothing: room is its own
        # two-line titles: at 80 columns the numbers keep their width and the kernel has room for its name
        title = METRIC_TITLES.get(km, km)
        for col in ("status", "calls\nbefore", "calls\nafter", f"{title}\nbefore", f"{title}\nafter", "\nchange"):
            t.add_column(col, justify="left" if col == "status" else "right", no_wrap=True, min_width=8,
                         header_style="bold")
        room = max(20, console.width - 6 * 9)  # six columns of 8 cells, each one apart
        # a kernel's tag repeats the column's title; copies, sets and syncs keep theirs
        t.add_column("\nkernel", no_wrap=True, overflow="ellipsis", max_width=room, header_style="bold")
        shown = [k for k in changes if k.status(km) != "same" or k.delta("calls")]
        for k in shown[:limit]:
            st = k.status(km)
            t.add_row(Text(st, style=STATUS_STYLE[st]), str(k.before.get("calls", 0)), str(k.after.get("calls", 0)),
                      fmt(km, k.before.get(km, 0), ascii_only), fmt(km, k.after.get(km, 0), ascii_only),
                      Text(fmt_signed(km, k.delta(km), ascii_only), style=STATUS_STYLE[st]),
                      frame_text(k.frame, width=room, tag=k.frame.kind != "kernel"))
        console.print(t)
        same = len(changes) - len(shown)
        more = max(0, len(shown) - limit)
        if same or more:
            console.print(Text(f"({same} unchanged, {more} more past --limit {limit})", style="dim"))

    def _paths(self, root: DiffNode, metric: str, limit: int, console: Console, ascii_only: bool) -> None:
        changes = path_changes(root, metric)
        title = METRIC_TITLES.get(metric, metric)
        console.print(Text(f"\ncall paths by self {title}", style="bold"))
        if not changes:
            console.print(Text(f"no call path changed its {title}", style="dim"))
            return
        path_width = max(20, console.width - 4 * 11)
        t = Table(box=None, padding=(0, 1, 0, 0))
        for col in ("status", "before", "after", "change"):
            t.add_column(col, justify="left" if col == "status" else "right", no_wrap=True, min_width=8,
                         header_style="bold")
        t.add_column("call path (innermost first, then callers)", no_wrap=True, overflow="ellipsis", max_width=path_width,
                     header_style="bold")
        keep = 2 if console.width < 100 else 4
        for c in changes[:limit]:
            st = c.status
            t.add_row(Text(st, style=STATUS_STYLE[st]), fmt(metric, c.before, ascii_only) or "0",
                      fmt(metric, c.after, ascii_only) or "0",
                      Text(fmt_signed(metric, c.delta, ascii_only), style=STATUS_STYLE[st]),
                      path_text(c.path, keep, ascii_only))
        console.print(t)
        counts = {s: sum(1 for c in changes if c.status == s) for s in ("appeared", "vanished", "grew", "shrank")}
        summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        more = max(0, len(changes) - limit)
        console.print(Text(f"({summary}{f'; {more} more past --limit {limit}' if more else ''})", style="dim"))
