"""What every terminal view shares: metric columns that fit the width, frame labels in kind colours,
tree guides that degrade to ASCII, and a header."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from deepctx.cli.escape import printable
from deepctx.cli.formats.units import fmt, percent
from deepctx.profiles.fold import VIEWS_DEFAULT, Fold
from deepctx.profiles.metrics import METRIC_TITLES
from deepctx.profiles.tree import Frame, ViewNode, origin_lines

KIND_STYLE = {
    "thread": "bold magenta",
    "python": "green",
    "native": "cyan",
    "op": "yellow",
    "api": "bold blue",
    "kernel": "bold red",
    "memcpy": "red",
    "memset": "red",
    "sync": "bold yellow",
}
NAME_MIN = 24  # narrower than this, a frame name says nothing
NAME_FLOOR = 10  # ... but under 40 columns the numbers matter more
NAME_SHARE = 0.5  # metric columns give way before the frame column gets narrower than this share
SHORT_TITLES = {"cpu_samples": "CPU", "gpu_time_ns": "GPU time", "calls": "calls", "api_time_ns": "API time",
                "bytes": "bytes", "sync_wait_ns": "sync wait"}
VALUE_WIDTH = 9  # "123 ms", "21.4 MiB", "1000000"
PCT_WIDTH = 6


def metric_title(metric: str, short: bool = False) -> str:
    """A metric's title for the terminal. Metrics deepctx does not know are named by the profile: a PC-sampled
    capture's stall_* metrics by the CUPTI agent, which runs inside the target, so they are escaped."""
    return printable((SHORT_TITLES if short else METRIC_TITLES).get(metric, metric))


@dataclass
class ViewOptions:
    metric: str  # sort metric; percentages and --min-percent refer to it
    by: str = "total"  # sort by the "self" or the "total" value
    columns: list[str] = field(default_factory=list)  # metrics to show, sort metric first if absent
    min_percent: float = 0.5
    max_depth: int = 64
    limit: int = 50  # flat view rows
    fold: Fold = VIEWS_DEFAULT  # what the tree was built with
    folded: dict[str, int] = field(default_factory=dict)  # what folding took away (from_doc's root.extra)


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
    # below NAME_MIN columns the frame gives way rather than the numbers
    return Layout(shown, [m for m in wanted if m not in shown], max(NAME_FLOOR, width - used - 1))


def new_table(lay: Layout, opts: ViewOptions, self_title: str = "self", total_title: str = "total") -> Table:
    table = Table(box=None, padding=(0, 1, 0, 0), show_edge=False, pad_edge=False, expand=False)
    table.add_column("%", justify="right", width=PCT_WIDTH, no_wrap=True, header_style="bold")
    for m in lay.metrics:
        short = metric_title(m, short=True)
        for title in (self_title, total_title):
            table.add_column(Text(f"{short}\n{title}"), justify="right", width=VALUE_WIDTH, no_wrap=True,
                             overflow="ellipsis", header_style="bold")
    table.add_column("frame", no_wrap=True, overflow="ellipsis", min_width=min(NAME_MIN, lay.name_width),
                     max_width=lay.name_width,
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
NAME_KEEP_WITH_FILE = 8
ELLIPSIS = "…"


def path_forms(file: str, cwd: str | None = None) -> list[str]:
    """Ways to write a frame's file, longest first, down to its basename: as recorded, relative to the
    working directory (when it is below it), then with the middle elided, keeping the folders nearest the
    file: '/opt/…/torch/nn/modules/module.py', '…/nn/modules/module.py', ..., 'module.py'."""
    forms = [file]
    cwd = os.getcwd() if cwd is None else cwd
    if file.startswith(cwd.rstrip("/") + "/"):
        forms.append(file[len(cwd.rstrip("/")) + 1:])
    parts = forms[-1].split("/")
    head = parts[0] or "/" + parts[1] if len(parts) > 2 else ""  # '' for a relative path's first folder too
    for k in range(len(parts) - 2, 1, -1):  # '…/module.py' would say no more than 'module.py'
        tail = "/".join(parts[-k:])
        if head and k < len(parts) - 2:
            forms.append(f"{head}/{ELLIPSIS}/{tail}")
        forms.append(f"{ELLIPSIS}/{tail}")
    forms.append(parts[-1])
    return sorted(dict.fromkeys(f for f in forms if f), key=cell_len, reverse=True)


def short_name(name: str, room: int, keep: int = NAME_KEEP) -> str:
    """name in at most room cells (never below keep): a C++ argument list goes first ('f(…)'), then
    template arguments ('f<…>'), then the middle of a qualified name, so the namespace's start and the
    function's own name stay; other names are cut at the end."""
    if cell_len(name) <= room:
        return name
    room = max(keep, room)
    paren = _argument_list(name)
    if paren > 0 and paren + 3 <= room:
        return name[:paren] + "(" + ELLIPSIS + ")"
    if paren > 0:
        name = name[:paren]
        if len(name) < room:
            return name + ELLIPSIS
    name = _collapse_templates(name)
    if len(name) < room:
        return name + (ELLIPSIS if paren > 0 else "")
    keep = room - 1
    if "::" not in name and "." not in name:
        return name[:keep] + ELLIPSIS  # a mangled or plain name: its start says most
    front = keep // 3  # a qualified one: its start and the function's own name at its end
    return name[:front] + ELLIPSIS + name[len(name) - (keep - front):]


def _collapse_templates(name: str) -> str:
    """Outermost template arguments as '<…>': 'f<a<b>, c>' -> 'f<…>'."""
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<" + ELLIPSIS)
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                out.append(">")
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _argument_list(name: str) -> int:
    """Where a C++ name's argument list starts (the '(' matching its last ')'), or -1."""
    end = name.rfind(")")
    if end < 0 or name[end + 1:].strip() not in ("", "const"):
        return -1
    depth = 0
    for i in range(end, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return i
    return -1


def frame_text(frame: Frame, tid: int | None = None, extra: dict[str, Any] | None = None,
               width: int | None = None, tag: bool = True) -> Text:
    """The frame in its kind's colour; kind tags in brackets so it reads the same without colour. With a
    width, what does not fit gives way in this order, so that the function, its file and its line stay:
    the file's path (relative to the working directory, then its middle elided, down to the basename), a
    native frame's library, then the name (its C++ argument list, then its middle). Nothing wraps."""
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
    line = f":{frame.line}" if frame.line else ""
    tail = f"  [{frame.kind}]" if tag and frame.kind not in ("python", "native", "root") else ""
    if extra and extra.get("compiled_from"):  # torch.compile's kernel: the model lines before the launch shape
        origin = origin_lines(extra["compiled_from"])
        tail += f"  from {printable(origin)}" if origin else "  [compiled]"
    if extra and extra.get("grid"):
        g, b = extra["grid"], extra.get("block") or []
        shape = f"  grid {'x'.join(map(str, g))} block {'x'.join(map(str, b))}"
        # the launch shape gives way first where the width is short (the model's lines say more)
        if width is None or not extra.get("compiled_from") or cell_len(frame.name + tail + shape) <= width:
            tail += shape
    name = frame.name
    if frame.file:
        forms = path_forms(frame.file)
        where = forms[0]
        if width is not None:
            # the longest form that fits beside the whole name, else the basename and a shorter name
            fits = [f for f in forms if cell_len(name) + cell_len(f"  {f}{line}{tail}") <= width]
            where = fits[0] if fits else forms[-1]
        where = f"  {where}{line}"
    elif frame.module and frame.kind == "native":
        where = f"  {frame.module}"
        if width is not None and cell_len(name) + cell_len(where + tail) > width:
            where = ""  # a library says less than the function's name
    else:
        where = ""
    if width is not None:
        # beside a file and line the name may shrink further: they say where it is
        name = short_name(name, width - cell_len(where + tail), NAME_KEEP_WITH_FILE if frame.file else NAME_KEEP)
    text.append(name, style=style)
    text.append(where + tail, style="dim")
    return text


def frame_need(frame: Frame, tag: bool = True) -> int:
    """The cells frame_text needs to keep the whole name: beside its file's basename and line, and for a
    native frame without its library (what frame_text gives way first)."""
    short = frame._replace(file=frame.file and frame.file.rsplit("/", 1)[-1],
                           module=None if frame.kind == "native" else frame.module)
    return frame_text(short, tag=tag).cell_len


def fitted_table(titles: list[str], rows: list[list[str | Text]], width: int | None, *, left: tuple[str, ...] = (),
                 optional: tuple[str, ...] = (), last_min: int = 16, title: str | None = None) -> Table:
    """A table whose columns never wrap: each but the last as wide as its widest cell, the last (a command,
    a name) given what is left and cut at its end. Where even that leaves the last column under last_min
    cells, the optional columns go, in the order given, and a caption says which. width None: every
    column whole."""
    def cell(c: str | Text) -> int:
        return c.cell_len if isinstance(c, Text) else cell_len(c)

    need = [max([cell_len(t)] + [cell(r[i]) for r in rows]) for i, t in enumerate(titles)]
    shown = list(range(len(titles)))
    pad = 2

    def used() -> int:
        return sum(need[i] + pad for i in shown[:-1])

    hidden = []
    for name in optional:
        if width is None or used() + last_min <= width:
            break
        shown.remove(titles.index(name))
        hidden.append(name)
    caption = f"({', '.join(hidden)} not shown at {width} columns)" if hidden else None
    table = Table(box=None, padding=(0, pad, 0, 0), pad_edge=False, show_edge=False, title=title,
                  title_justify="left", title_style="bold", caption=caption, caption_justify="left",
                  caption_style="dim")
    for i in shown[:-1]:
        table.add_column(titles[i], no_wrap=True, width=need[i], justify="left" if titles[i] in left else "right")
    table.add_column(titles[-1], no_wrap=True, overflow="ellipsis",
                     max_width=None if width is None else max(cell_len(titles[-1]), width - used()))
    for r in rows:
        table.add_row(*(r[i] for i in shown))
    return table


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
    console.print(head)
    note = duty_note(doc)
    if note:
        console.print(Text(note, style="dim"))
    totals = Text("totals: ", style="dim")
    parts = [f"{metric_title(m)} {fmt(m, v, ascii_only)}" for m, v in root.total.items() if v]
    totals.append(", ".join(parts) or "nothing was measured")
    console.print(totals)
    n = opts.folded
    folded = ([f"start-up frames above {n['startup']} Python path{'s' * (n['startup'] > 1)} (--show-startup)"]
              if n.get("startup") else []) + ([f"{n['plumbing']} plumbing frames (--show-plumbing)"]
                                               if n.get("plumbing") else []) \
        + ([f"{n['dispatch']} native frames around operators (--show-dispatch)"] if n.get("dispatch") else [])
    if folded:
        console.print(Text("folded: " + ", ".join(folded), style="dim"))
    sort = f"{view}, % of {'self' if opts.by == 'self' else 'total'} {metric_title(opts.metric)}"
    console.print(Text(sort, style="dim"))
    if console.color_system:
        legend = Text("kinds: ", style="dim")
        for kind in ("python", "native", "op", "api", "kernel", "memcpy", "sync"):
            legend.append(kind, style=KIND_STYLE[kind])
            legend.append(" ")
        console.print(legend)


def duty_note(doc: dict[str, Any]) -> str:
    """With a GPU duty cycle the GPU figures are estimates: how they were made, else ''."""
    stats = doc.get("stats") or {}
    duty = stats.get("gpu_probe_duty_permille")
    if duty is None or duty >= 1000:
        return ""
    by_busy = stats.get("gpu_busy_scaled_permille", 0) >= 1000  # daemon/busy_meter.py
    return (f"GPU calls and device times: recorded {duty / 10:.1f}% of the time, scaled up to the capture "
            + ("by the GPU's busy time (estimates: the shares between paths hold)" if by_busy else
               "by time (estimates: the shares between paths hold; totals run low where recording slows the job)"))


def footer(console: Console, lay: Layout, hidden_nodes: int, opts: ViewOptions, what: str = "nodes") -> None:
    if hidden_nodes:
        console.print(Text(f"({hidden_nodes} {what} below {opts.min_percent}% or deeper than {opts.max_depth} "
                           f"hidden; --min-percent 0 shows all)", style="dim"))
    if lay.hidden:
        names = ", ".join(metric_title(m) for m in lay.hidden)
        console.print(Text(f"({names} not shown: the terminal is {console.width} columns wide; "
                           f"a wider terminal, --width or --columns shows them)", style="dim"))
