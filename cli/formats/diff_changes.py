"""deepctx diff in the terminal: functions, lines or call paths whose share changed, significant ones first,
the rest counted as within sampling noise (views/diff_significance.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from deepctx.cli.formats.diff_table import STATUS_STYLE, path_text
from deepctx.cli.formats.terminal import frame_text, is_ascii
from deepctx.cli.formats.units import fmt, fmt_signed
from deepctx.cli.views.diff_significance import Change, Comparison
from deepctx.profiles.metrics import METRIC_TITLES

STYLES = {**STATUS_STYLE, "noise": "dim"}
ROW_NAMES = {"function": "function", "line": "line", "path": "call path (innermost first, then callers)"}
PLURALS = {"function": "functions", "line": "lines", "path": "call paths"}


def _pp(x: float) -> str:
    return f"{100 * x:+.2f}"


class DiffChanges:
    def render(self, cmp: Comparison, limit: int, console: Console, show_noise: bool = False) -> None:
        ascii_only = is_ascii(console)
        title = METRIC_TITLES.get(cmp.metric, cmp.metric)
        how = "share of each side's total" if cmp.normalised else "absolute values"
        console.print(Text(f"\n{PLURALS[cmp.rollup]} by self {title} ({how})", style="bold"))
        sampled = cmp.critical_z is not None
        if sampled:
            console.print(Text(f"significant: the change is beyond ±{cmp.critical_z:.2f} standard errors of sampling "
                               f"noise (1% chance over all {len(cmp.changes)} rows of an unchanged program)",
                               style="dim"), overflow="fold")
        else:
            console.print(Text(f"{title} is counted or timed, not sampled: every change is listed (run-to-run "
                               "variation of the program itself is not modelled)", style="dim"), overflow="fold")
        rows = [c for c in cmp.changes if c.status != "same" and (show_noise or c.significant)]
        if not rows:
            row = ROW_NAMES[cmp.rollup].split(" (")[0]
            console.print(Text(f"no {row} changed its {title} beyond sampling noise" if sampled
                               else f"no {row} changed its {title}", style="dim"))
        else:
            console.print(self._table(cmp, rows[:limit], console, ascii_only))
        noise, more = cmp.within_noise, max(0, len(rows) - limit)
        parts = [f"{len(cmp.significant)} {'significant' if sampled else 'changed'}"]
        if sampled:
            parts.append(f"{noise} within sampling noise" + ("" if show_noise else " (--show-noise lists them)"))
        if more:
            parts.append(f"{more} more past --limit {limit}")
        console.print(Text(f"({', '.join(parts)})", style="dim"))

    def _table(self, cmp: Comparison, rows: list[Change], console: Console, ascii_only: bool) -> Table:
        pm = "+-" if ascii_only else "±"
        t = Table(box=None, padding=(0, 1, 0, 0))
        unit = "%" if cmp.normalised else ""
        cols = ["status", f"before{unit and ' %'}", f"after{unit and ' %'}", "change" + (" pp" if unit else "")]
        if cmp.critical_z is not None:
            cols += [f"{pm} noise", "z"]
        for col in cols:
            t.add_column(col, justify="left" if col == "status" else "right", no_wrap=True, header_style="bold")
        # what the numbers leave ("appeared", "+81.82", "-50.0": 8, 7 and 6 cells at most, one apart)
        room = max(20, console.width - sum(max(len(c), 8 if c == "status" else 7) + 1 for c in cols))
        t.add_column(ROW_NAMES[cmp.rollup], no_wrap=True, overflow="ellipsis", max_width=room, header_style="bold")
        keep = 2 if console.width < 100 else 4
        for c in rows:
            st = c.status
            if cmp.normalised:
                cells = [f"{100 * c.share_before:.2f}", f"{100 * c.share_after:.2f}", _pp(c.delta)]
            else:
                cells = [fmt(cmp.metric, c.before, ascii_only) or "0", fmt(cmp.metric, c.after, ascii_only) or "0",
                         fmt_signed(cmp.metric, c.after - c.before, ascii_only)]
            if cmp.critical_z is not None and c.margin is not None and c.z is not None:
                margin = f"{100 * c.margin:.2f}" if cmp.normalised else f"{c.margin:.0f}"
                cells += [margin, f"{c.z:+.1f}"]
            name = (path_text(c.key, keep, ascii_only) if cmp.rollup == "path"
                    else frame_text(c.key[0]._replace(module=None) if c.key[0].file else c.key[0], width=room))
            t.add_row(Text(st, style=STYLES[st]), *cells[:2], Text(cells[2], style=STYLES[st]), *cells[3:], name)
        return t
