"""deepctx diff in the terminal: GPU activity by kernel, then call paths, with what changed."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from deepctx.cli.escape import printable
from deepctx.cli.formats.terminal import frame_text, is_ascii, metric_title
from deepctx.cli.formats.units import fmt, fmt_signed
from deepctx.cli.views.diff import DiffNode, kernel_changes, kernel_metric, path_changes
from deepctx.profiles.metrics import METRIC_TITLES
from deepctx.profiles.tree import Frame

STATUS_STYLE = {"appeared": "bold red", "grew": "red", "shrank": "green", "vanished": "bold green", "same": "dim"}


def path_text(path: tuple[Frame, ...], keep: int, ascii_only: bool) -> Text:
    """Innermost frame first, then its callers outwards (a narrow terminal cuts the outer ones); frames
    past keep are counted, not hidden."""
    sep = " <- " if ascii_only else " ← "
    text = Text()
    for i, f in enumerate(reversed(path[-keep:])):
        if i:
            text.append(sep, style="dim")
        text.append_text(frame_text(f._replace(module=None)))
    if len(path) > keep:
        text.append(f"{sep}[{len(path) - keep} more]", style="dim")
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
        t = Table(box=None, padding=(0, 1, 0, 0))
        # two-line titles: at 80 columns the numbers keep their width and the kernel has room for its name
        title = METRIC_TITLES.get(km, km)
        for col in ("status", "calls\nbefore", "calls\nafter", f"{title}\nbefore", f"{title}\nafter", "\nchange"):
            t.add_column(col, justify="left" if col == "status" else "right", no_wrap=True, min_width=8,
                         header_style="bold")
        room = max(20, console.width - 6 * 9)  # six columns of 8 cells, each one apart
        t.add_column("\nkernel", no_wrap=True, overflow="ellipsis", max_width=room, header_style="bold")
        shown = [k for k in changes if k.status(km) != "same" or k.delta("calls")]
        for k in shown[:limit]:
            st = k.status(km)
            t.add_row(Text(st, style=STATUS_STYLE[st]), str(k.before.get("calls", 0)), str(k.after.get("calls", 0)),
                      fmt(km, k.before.get(km, 0), ascii_only), fmt(km, k.after.get(km, 0), ascii_only),
                      Text(fmt_signed(km, k.delta(km), ascii_only), style=STATUS_STYLE[st]),
                      frame_text(k.frame, width=room))
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
