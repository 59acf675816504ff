"""deepctx diff in the terminal: functions, lines or call paths whose share changed, significant ones first,
the rest counted as within sampling noise (views/diff_significance.py)."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from deepctx.cli.formats.diff_table import STATUS_STYLE, path_text
from deepctx.cli.formats.terminal import frame_need, frame_text, is_ascii
from deepctx.cli.formats.units import fmt, fmt_signed
from deepctx.cli.views.diff_significance import Change, Comparison
from deepctx.profiles.metrics import METRIC_TITLES
from deepctx.profiles.tree import Frame

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
        """The numbers as wide as their widest cell; the function, line or call path gets the rest. Where
        that is too little for a name beside its file's basename and line, the noise columns go (z first)
        and a caption says so: names and lines are what a reader looks up."""
        pm = "+-" if ascii_only else "±"
        unit = "%" if cmp.normalised else ""
        titles = ["status", f"before{unit and ' %'}", f"after{unit and ' %'}", "change" + (" pp" if unit else "")]
        sampled = cmp.critical_z is not None
        if sampled:
            titles += [f"{pm} noise", "z"]
        cells = [self._cells(cmp, c, ascii_only) for c in rows]
        widths = [max([cell_len(t)] + [cell_len(r[i]) for r in cells]) for i, t in enumerate(titles)]
        shown = list(range(len(titles)))
        if cmp.rollup == "path":
            need = max(frame_need(c.key[-1]._replace(module=None)) for c in rows)
        else:
            need = max(frame_need(self._frame(c)) for c in rows)

        def room() -> int:
            return console.width - sum(widths[i] + 1 for i in shown)

        hidden = []
        for title in reversed(titles[4:]):  # z, then the noise margin
            if room() >= need:
                break
            shown.remove(titles.index(title))
            hidden.append(title)
        width = max(20, room())
        caption = f"({', '.join(reversed(hidden))} not shown at {console.width} columns)" if hidden else None
        t = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, caption=caption, caption_justify="left",
                  caption_style="dim")
        for i in shown:
            t.add_column(titles[i], justify="left" if i == 0 else "right", no_wrap=True, width=widths[i],
                         header_style="bold")
        name_title = ROW_NAMES[cmp.rollup]
        if cell_len(name_title) > width:
            name_title = name_title.split(" (")[0]
        t.add_column(name_title, no_wrap=True, overflow="ellipsis", max_width=width, header_style="bold")
        keep = 2 if console.width < 100 else 4
        for c, row in zip(rows, cells, strict=True):
            st = c.status
            name = (path_text(c.key, keep, ascii_only, width) if cmp.rollup == "path"
                    else frame_text(self._frame(c), width=width))
            styled = [Text(v, style=STYLES[st]) if i in (0, 3) else v for i, v in enumerate(row)]
            t.add_row(*(styled[i] for i in shown), name)
        return t

    @staticmethod
    def _frame(c: Change) -> Frame:
        """A function's or line's frame: the library of a frame with a file says nothing more."""
        f = c.key[0]
        return f._replace(module=None) if f.file else f

    @staticmethod
    def _cells(cmp: Comparison, c: Change, ascii_only: bool) -> list[str]:
        """status, before, after, change, and for a sampled metric the noise margin and z."""
        if cmp.normalised:
            cells = [f"{100 * c.share_before:.2f}", f"{100 * c.share_after:.2f}", _pp(c.delta)]
        else:
            cells = [fmt(cmp.metric, c.before, ascii_only) or "0", fmt(cmp.metric, c.after, ascii_only) or "0",
                     fmt_signed(cmp.metric, c.after - c.before, ascii_only)]
        if cmp.critical_z is not None:
            if c.margin is not None and c.z is not None:
                cells += [f"{100 * c.margin:.2f}" if cmp.normalised else f"{c.margin:.0f}", f"{c.z:+.1f}"]
            else:
                cells += ["", ""]
        return [c.status, *cells]
