"""The busiest processes, kernels and lines as terminal tables (`deepctx top`, `deepctx fleet top`).

The data is a plain dict (TopData), the same from the daemon's store and from ClickHouse:
{since_unix, until_unix, windows, sort, kernel_sort, processes: [{host, pid, command, container,
windows, metrics}], kernels: [{name, processes, metrics}], lines: [{file, line, function, metrics}]}."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from deepctx.cli.escape import printable_doc
from deepctx.cli.formats.units import fmt

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


def renderable(data: TopData, title: str = "deepctx top", show_host: bool = False) -> RenderableType:
    data = printable_doc(data)  # commands, kernel, function and file names come from targets
    span = _span(data)
    head = Text()
    head.append(title, style="bold")
    head.append(f"  last {_ago(span)} ({data['windows']} windows), ranked by {data['sort']}"
                f"  {time.strftime('%H:%M:%S', time.localtime(float(data['until_unix'])))}")
    if not data["processes"]:
        return Group(head, Text("no windows in this range: continuous mode has stored nothing yet "
                                "(or nothing of yours)", style="dim"))
    procs = Table(box=None, title="processes", title_justify="left", title_style="bold")
    cols = ["PID", "GPU TIME", "LAUNCH/S", "SYNC WAIT", "COPIED", "CPU SAMPLES", "CONTAINER", "COMMAND"]
    if show_host:
        cols.insert(0, "HOST")
    for c in cols:
        procs.add_column(c, justify="right" if c not in ("HOST", "COMMAND", "CONTAINER") else "left",
                         no_wrap=c != "COMMAND")
    for p in data["processes"]:
        row: list[str | Text] = [str(p["pid"]), fmt("gpu_time_ns", _v(p, "gpu_time_ns")),
               f"{_v(p, 'launches') / span:.1f}" if _v(p, "launches") else "",
               fmt("sync_wait_ns", _v(p, "sync_wait_ns")), fmt("bytes", _v(p, "copy_bytes")),
               str(_v(p, "cpu_samples") or ""), Text(_short(p["container"])), Text(p["command"])]
        if show_host:
            row.insert(0, Text(p["host"]))
        procs.add_row(*row)
    kernels = Table(box=None, title=f"kernels (by {data['kernel_sort']})", title_justify="left", title_style="bold")
    for c in ("CALLS", "GPU TIME", "API TIME", "PROCS", "KERNEL"):
        kernels.add_column(c, justify="left" if c == "KERNEL" else "right", no_wrap=c != "KERNEL")
    for k in data["kernels"]:
        kernels.add_row(str(_v(k, "calls")), fmt("gpu_time_ns", _v(k, "gpu_time_ns")),
                        fmt("api_time_ns", _v(k, "api_time_ns")), str(k["processes"]), Text(k["name"]))
    lines = Table(box=None, title="Python lines (costs under each line's innermost frame)", title_justify="left",
                  title_style="bold")
    for c in ("GPU TIME", "CPU SAMPLES", "CALLS", "SYNC WAIT", "LINE"):
        lines.add_column(c, justify="left" if c == "LINE" else "right", no_wrap=c != "LINE")
    for ln in data["lines"]:
        lines.add_row(fmt("gpu_time_ns", _v(ln, "gpu_time_ns")), str(_v(ln, "cpu_samples") or ""),
                      str(_v(ln, "calls") or ""), fmt("sync_wait_ns", _v(ln, "sync_wait_ns")),
                      Text(f"{ln['function']}  {ln['file']}:{ln['line']}"))
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
