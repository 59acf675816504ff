"""Top-down tree with percentages, for the terminal (rich: colours when the terminal has them)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from deepctx.cli.escape import printable

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
METRIC_UNITS = {"cpu_samples": "samples", "calls": "calls", "api_time_ns": "ns", "gpu_time_ns": "ns",
                "bytes": "B", "sync_wait_ns": "ns"}


def inclusive_values(root: dict[str, Any], metric: str) -> dict[int, int]:
    """Inclusive value of every node (keyed by id(node)), computed in one post-order pass."""
    out: dict[int, int] = {}
    stack: list[tuple[dict[str, Any], bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            out[id(node)] = node["metrics"].get(metric, 0) + sum(out[id(c)] for c in node["children"])
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in node["children"])
    return out


def frame_label(node: dict[str, Any]) -> Text:
    kind = printable(node["kind"])
    text = Text()
    if kind == "thread":
        text.append(f"[thread] {printable(node['name'])}", style=KIND_STYLE[kind])
        if node.get("tid") is not None:
            text.append(f" ({node['tid']})", style="dim")
        return text
    text.append(printable(node["name"]), style=KIND_STYLE.get(kind, ""))
    if node.get("file"):
        where = printable(node["file"]) + (f":{node['line']}" if node.get("line") else "")
        text.append(f"  {where}", style="dim")
    elif node.get("module") and kind == "native":
        text.append(f"  {printable(node['module'])}", style="dim")
    if kind not in ("python", "native"):
        text.append(f"  [{kind}]", style="dim")
    return text


def render(doc: dict[str, Any], metric: str = "cpu_samples", min_percent: float = 0.5, max_depth: int = 64,
           console: Console | None = None) -> None:
    console = console or Console()
    root = doc["root"]
    incl = inclusive_values(root, metric)
    total = incl[id(root)]
    unit = METRIC_UNITS.get(metric, "")
    head = Text()
    head.append(printable(f"{doc['command']}"), style="bold")
    head.append(f"  pid {doc['pid']}, {total} {unit} of {metric} in {doc['duration_s']:.1f} s")
    if doc.get("sample_hz"):
        head.append(f" at {doc['sample_hz']} Hz")
    stats = doc.get("stats", {})
    duty = stats.get("gpu_probe_duty_permille")
    if duty is not None and duty < 1000:  # a duty cycle: the GPU figures are estimates, say how they were made
        by_busy = stats.get("gpu_busy_scaled_permille", 0) >= 1000  # daemon/busy_meter.py
        head.append(f"\nGPU calls and device times: recorded {duty / 10:.1f}% of the time, scaled up to the capture "
                    + ("by the GPU's busy time (estimates: the shares between paths hold)" if by_busy else
                       "by time (estimates: the shares between paths hold; totals run low where recording slows "
                       "the job)"), style="dim")
    tree = Tree(head)
    if total == 0:
        tree.add(Text("no samples: the process used no CPU while it was profiled", style="dim"))
        console.print(tree)
        return
    hidden = 0
    stack: list[tuple[dict[str, Any], Tree, int]] = [(root, tree, 0)]
    while stack:
        node, branch, depth = stack.pop()
        kids = sorted(node["children"], key=lambda c: incl[id(c)], reverse=True)
        shown = []
        for child in kids:
            pct = 100.0 * incl[id(child)] / total
            if pct < min_percent or depth >= max_depth:
                hidden += 1
                continue
            label = Text(f"{pct:5.1f}% ", style="bold")
            self_v = child["metrics"].get(metric, 0)
            label.append_text(frame_label(child))
            if self_v:
                label.append(f"  self {100.0 * self_v / total:.1f}%", style="dim")
            shown.append((child, branch.add(label)))
        for child, sub in reversed(shown):
            stack.append((child, sub, depth + 1))
    console.print(tree)
    if hidden:
        console.print(Text(f"({hidden} nodes below {min_percent}% or deeper than {max_depth} hidden; "
                           f"--min-percent 0 shows all)", style="dim"))
