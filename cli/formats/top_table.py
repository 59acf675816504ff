"""The busiest processes, kernels and lines as terminal tables (`deepctx top`, `deepctx fleet top`).

The data is a plain dict (TopData), the same from the daemon's store and from ClickHouse:
{since_unix, until_unix, windows, sort, kernel_sort, processes: [{host, pid, command, container,
windows, metrics}], kernels: [{name, processes, metrics}], lines: [{file, line, function, metrics}]}."""

from __future__ import annotations

import time
from typing import Any

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.text import Text

from deepctx.cli.escape import printable_doc
from deepctx.cli.formats.terminal import fitted_table, frame_text, short_name
from deepctx.cli.formats.units import fmt
from deepctx.profiles.tree import Frame

TopData = dict[str, Any]


def _v(row: dict[str, Any], metric: str) -> int:
    return int(row["metrics"].get(metric, 0))


def _span(data: TopData) -> float:
    return max(1e-9, float(data["until_unix"]) - float(data["since_unix"]))


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _room(rows: list[list[Any]], titles: list[str], width: int | None) -> int | None:
    """What the last column has left in width cells, once the others have their whole content."""
    if width is None:
        return None
    used = sum(max([cell_len(t)] + [cell_len(str(r[i])) for r in rows]) + 2 for i, t in enumerate(titles[:-1]))
    return max(cell_len(titles[-1]), width - used)


def renderable(data: TopData, title: str = "deepctx top", show_host: bool = False,
               width: int | None = None) -> RenderableType:
    """width: the console's, so that kernel names and lines shorten as the report's frames do (None: whole)."""
    data = printable_doc(data)  # commands, kernel, function and file names come from targets
    span = _span(data)
    head = Text()
    head.append(title, style="bold")
    head.append(f"  last {_ago(span)} ({data['windows']} windows), ranked by {data['sort']}"
                f"  {time.strftime('%H:%M:%S', time.localtime(float(data['until_unix'])))}")
    if not data["processes"]:
        return Group(head, Text("no windows in this range: continuous mode has stored nothing yet "
                                "(or nothing of yours)", style="dim"))
    cols = ["PID", "GPU TIME", "LAUNCH/S", "SYNC WAIT", "COPIED", "CPU SAMPLES", "CONTAINER", "COMMAND"]
    if show_host:
        cols.insert(0, "HOST")
    rows: list[list[Any]] = []
    for p in data["processes"]:
        row: list[Any] = [str(p["pid"]), fmt("gpu_time_ns", _v(p, "gpu_time_ns")),
                          f"{_v(p, 'launches') / span:.1f}" if _v(p, "launches") else "",
                          fmt("sync_wait_ns", _v(p, "sync_wait_ns")), fmt("bytes", _v(p, "copy_bytes")),
                          str(_v(p, "cpu_samples") or ""), Text(_short(p["container"])), Text(p["command"])]
        if show_host:
            row.insert(0, Text(p["host"]))
        rows.append(row)
    procs = fitted_table(cols, rows, width, left=("HOST", "COMMAND", "CONTAINER"), title="processes",
                         optional=("CONTAINER", "COPIED", "SYNC WAIT", "LAUNCH/S"))
    kcols = ["CALLS", "GPU TIME", "API TIME", "PROCS", "KERNEL"]
    krows = [[str(_v(k, "calls")), fmt("gpu_time_ns", _v(k, "gpu_time_ns")), fmt("api_time_ns", _v(k, "api_time_ns")),
              str(k["processes"]), ""] for k in data["kernels"]]
    room = _room(krows, kcols, width)
    for r, k in zip(krows, data["kernels"], strict=True):
        r[-1] = Text(k["name"] if room is None else short_name(k["name"], room))
    kernels = fitted_table(kcols, krows, width, left=("KERNEL",), title=f"kernels (by {data['kernel_sort']})")
    lcols = ["GPU TIME", "CPU SAMPLES", "CALLS", "SYNC WAIT", "LINE"]
    lrows = [[fmt("gpu_time_ns", _v(ln, "gpu_time_ns")), str(_v(ln, "cpu_samples") or ""), str(_v(ln, "calls") or ""),
              fmt("sync_wait_ns", _v(ln, "sync_wait_ns")), ""] for ln in data["lines"]]
    room = _room(lrows, lcols, width)
    for r, ln in zip(lrows, data["lines"], strict=True):
        # the function, its file and its line stay: the file's path shortens first (cli/formats/terminal.py)
        r[-1] = frame_text(Frame("python", ln["function"], ln["file"], ln["line"]), width=room)
    lines = fitted_table(lcols, lrows, width, left=("LINE",),
                         title="Python lines (costs under each line's innermost frame)")
    parts: list[RenderableType] = [head, procs]
    if data["kernels"]:
        parts.append(kernels)
    if data["lines"]:
        parts.append(lines)
    return Group(*parts)


def _short(container: str) -> str:
    """Container ids as docker shows them (12 characters); cgroup paths as they are."""
    if len(container) == 64 and all(c in "0123456789abcdef" for c in container):
        return container[:12]
    return container
