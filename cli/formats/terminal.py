"""What every terminal view shares: metric columns that fit the width, frame labels in kind colours,
tree guides that degrade to ASCII, and a header."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from deepctx.cli.escape import printable
from deepctx.cli.formats.tree import KIND_STYLE
from deepctx.cli.formats.units import fmt, percent
from deepctx.profile.metrics import METRIC_TITLES
from deepctx.profile.tree import Frame, ViewNode

NAME_MIN = 24  # narrower than this, a frame name says nothing
NAME_SHARE = 0.4  # metric columns give way before the frame column gets narrower than this share
SHORT_TITLES = {"cpu_samples": "CPU", "gpu_time_ns": "GPU time", "calls": "calls", "api_time_ns": "API time",
                "bytes": "bytes", "sync_wait_ns": "sync wait"}
VALUE_WIDTH = 9  # "123 ms", "21.4 MiB", "1000000"
PCT_WIDTH = 6


@dataclass
class ViewOptions:
    metric: str  # sort metric; percentages and --min-percent refer to it
    by: str = "total"  # sort by the "self" or the "total" value
    columns: list[str] = field(default_factory=list)  # metrics to show, sort metric first if absent
    min_percent: float = 0.5
    max_depth: int = 64
    limit: int = 50  # flat view rows


@dataclass(frozen=True)
class Layout:
    """Metric columns that fit: every shown metric has self and total, the sort metric also a percent."""

    metrics: list[str]
    hidden: list[str]
    name_width: int


def layout(opts: ViewOptions, width: int) -> Layout:
    wanted = [opts.metric] + [m for m in opts.columns if m != opts.metric]
    name_min = max(NAME_MIN, int(width * NAME_SHARE))
    shown: list[str] = []
    for m in wanted:
        need = PCT_WIDTH + 1 + (len(shown) + 1) * 2 * (VALUE_WIDTH + 1) + name_min
        if need > width and shown:
            break
        shown.append(m)
    used = PCT_WIDTH + 1 + len(shown) * 2 * (VALUE_WIDTH + 1)
    return Layout(shown, [m for m in wanted if m not in shown], max(NAME_MIN, width - used - 1))


def new_table(lay: Layout, opts: ViewOptions, self_title: str = "self", total_title: str = "total") -> Table:
    table = Table(box=None, padding=(0, 1, 0, 0), show_edge=False, pad_edge=False, expand=False)
    table.add_column("%", justify="right", width=PCT_WIDTH, no_wrap=True, header_style="bold")
    for m in lay.metrics:
        short = SHORT_TITLES.get(m, m)
        for title in (self_title, total_title):
            table.add_column(f"{short}\n{title}", justify="right", width=VALUE_WIDTH, no_wrap=True,
                             overflow="ellipsis", header_style="bold")
    table.add_column("frame", no_wrap=True, overflow="ellipsis", min_width=NAME_MIN, max_width=lay.name_width,
                     header_style="bold")
    return table


def value_cells(node_self: dict[str, int], node_total: dict[str, int], lay: Layout, opts: ViewOptions,
                grand: int, ascii_only: bool) -> list[Text]:
    basis = node_self if opts.by == "self" else node_total
    cells = [Text(percent(basis.get(opts.metric, 0), grand), style="bold")]
    for m in lay.metrics:
        cells.append(Text(fmt(m, node_self.get(m, 0), ascii_only), style="dim"))
        cells.append(Text(fmt(m, node_total.get(m, 0), ascii_only)))
    return cells


NAME_KEEP = 16  # a name cut to fit its column keeps at least this many characters


def frame_text(frame: Frame, tid: int | None = None, extra: dict[str, Any] | None = None,
               width: int | None = None) -> Text:
    """The frame in its kind's colour; kind tags in brackets so it reads the same without colour. With a
    width, a tagged frame's name too long for it is cut first (with an ellipsis), so that its kind tag and
    launch geometry stay visible (python and native frames are cut at the end as before)."""
    # names, files and modules come from the target: escaped before they reach the terminal
    frame = frame._replace(name=printable(frame.name), file=frame.file and printable(frame.file),
                           module=frame.module and printable(frame.module), kind=printable(frame.kind))
    text = Text()
    style = KIND_STYLE.get(frame.kind, "")
    if frame.kind == "thread":
        text.append(f"[thread] {frame.name}", style=style)
        if tid is not None:
            text.append(f" ({tid})", style="dim")
        return text
    after = Text()
    if frame.file:
        after.append(f"  {frame.file}" + (f":{frame.line}" if frame.line else ""), style="dim")
    elif frame.module and frame.kind == "native":
        after.append(f"  {frame.module}", style="dim")
    if frame.kind not in ("python", "native", "root"):
        after.append(f"  [{frame.kind}]", style="dim")
    if extra and extra.get("grid"):
        g, b = extra["grid"], extra.get("block") or []
        after.append(f"  grid {'x'.join(map(str, g))} block {'x'.join(map(str, b))}", style="dim")
    name = frame.name
    tagged = frame.kind not in ("python", "native", "root")
    if tagged and width is not None and cell_len(name) + after.cell_len > width:
        keep = max(NAME_KEEP, width - after.cell_len - 1)
        if keep < len(name):
            name = name[:keep] + "…"
    text.append(name, style=style)
    text.append_text(after)
    return text


class Guides:
    """Tree guides: box drawing where the terminal has it, ASCII otherwise; deep paths elided honestly."""

    def __init__(self, ascii_only: bool, name_width: int) -> None:
        self.bar, self.tee, self.elbow, self.blank = (("| ", "+-", "`-", "  ") if ascii_only
                                                       else ("│ ", "├─", "└─", "  "))
        self.max_levels = max(3, name_width // 5)  # guides use at most ~40% of the name column

    def prefix(self, guides: tuple[bool, ...], last: bool, depth: int) -> str:
        """Top-level rows have no guide; past max_levels the outer guides give way to the depth in brackets."""
        if depth == 0:
            return ""
        levels = [self.bar if g else self.blank for g in guides[1:]]
        levels.append(self.elbow if last else self.tee)
        if len(levels) > self.max_levels:
            return f"[{depth}]" + "".join(levels[-(self.max_levels - 2):])
        return "".join(levels)


def is_ascii(console: Console) -> bool:
    return not console.encoding.lower().startswith("utf")


def header(console: Console, doc: dict[str, Any], root: ViewNode, view: str, opts: ViewOptions) -> None:
    ascii_only = is_ascii(console)
    head = Text()
    head.append(printable(doc.get("command") or "?"), style="bold")
    head.append(f"  pid {doc.get('pid')}, {doc.get('duration_s', 0):.2f} s")
    if doc.get("mode"):
        head.append(f", GPU calls {doc['mode']}")
    console.print(head, overflow="fold")
    totals = Text("totals: ", style="dim")
    parts = [f"{METRIC_TITLES.get(m, m)} {fmt(m, v, ascii_only)}" for m, v in root.total.items() if v]
    totals.append(", ".join(parts) or "nothing was measured")
    console.print(totals, overflow="fold")
    sort = f"{view}, % of {'self' if opts.by == 'self' else 'total'} {METRIC_TITLES.get(opts.metric, opts.metric)}"
    console.print(Text(sort, style="dim"))
    if console.color_system:
        legend = Text("kinds: ", style="dim")
        for kind in ("python", "native", "op", "api", "kernel", "memcpy", "sync"):
            legend.append(kind, style=KIND_STYLE[kind])
            legend.append(" ")
        console.print(legend)


def footer(console: Console, lay: Layout, hidden_nodes: int, opts: ViewOptions, what: str = "nodes") -> None:
    if hidden_nodes:
        console.print(Text(f"({hidden_nodes} {what} below {opts.min_percent}% or deeper than {opts.max_depth} "
                           f"hidden; --min-percent 0 shows all)", style="dim"))
    if lay.hidden:
        names = ", ".join(METRIC_TITLES.get(m, m) for m in lay.hidden)
        console.print(Text(f"({names} not shown: the terminal is {console.width} columns wide; "
                           f"a wider terminal, --width or --columns shows them)", style="dim"))
