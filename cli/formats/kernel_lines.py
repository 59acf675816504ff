"""The kernel-lines view in the terminal (`deepctx report FILE --view kernel-lines`): per PC-sampled
kernel, its hot source lines, and under each its hot SASS instructions, with samples, share of the
kernel's samples and the top stall reasons. Plain lines cut to the console's width (80 columns fit)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from deepctx.cli.escape import printable
from deepctx.cli.views.kernel_lines import KernelLines, Row, kernel_lines

NUM = 8  # samples column
PCT = 7  # share column
LABEL_END = 32  # where labels end: at 80 columns, 30 are left for the stall reasons


def _stalls(row: Row) -> str:
    # the reasons' names come from the CUPTI agent, which runs inside the target: escaped as its names are
    return printable(", ".join(f"{reason} {n}" for reason, n in row.top_stalls()))


def _row(label: str, row: Row, total: int, width: int, indent: int) -> Text:
    """`label  samples  share  stalls`, the label cut so that the numbers and the stalls fit."""
    stalls = _stalls(row)
    label_w = max(12, min(LABEL_END, width - NUM - PCT - 24) - indent)  # numbers in one column at any indent
    label = printable(label)
    if len(label) > label_w:
        label = label[:label_w - 1] + "…"
    share = f"{100.0 * row.samples / total:.1f}%" if total else "-"
    text = Text(" " * indent)
    text.append(f"{label:<{label_w}}")
    text.append(f"{row.samples:>{NUM}} {share:>{PCT}}  ")
    text.append(stalls, style="yellow")
    text.truncate(width, overflow="ellipsis")
    return text


class KernelLinesText:
    view = "kernel-lines"

    def __init__(self, lines: int = 5, instructions: int = 3) -> None:
        self.max_lines = lines
        self.max_instructions = instructions

    def render(self, doc: dict[str, Any], console: Console, kernel: str | None = None) -> int:
        """Prints the view; returns how many kernels it showed."""
        kernels = kernel_lines(doc, kernel)
        width = console.width
        if not kernels:
            console.print(Text("no PC samples in this profile" + (f" for kernels matching {kernel!r}" if kernel else "")
                               + " (capture with `deepctx run --pc-sampling`)", style="dim"))
            return 0
        console.print(Text("per kernel: hot lines, their SASS; PC samples, % of the kernel's, top stalls",
                           style="dim"))
        for k in kernels:
            self._kernel(k, console, width)
        return len(kernels)

    def _kernel(self, k: KernelLines, console: Console, width: int) -> None:
        console.print()
        head = Text()
        head.append(printable(k.name), style="bold")
        head.append(f"  {k.samples} PC samples" + (f", launched from {k.sites} call paths" if k.sites > 1 else ""))
        head.truncate(width, overflow="ellipsis")
        console.print(head)
        hot = k.hot_lines()
        for lr in hot[:self.max_lines]:
            console.print(_row(lr.line.name, lr.line, k.samples, width, 2))
            instructions = sorted(lr.instructions.values(), key=lambda r: (-r.samples, r.name))
            for ins in instructions[:self.max_instructions]:
                console.print(_row(ins.name, ins, k.samples, width, 4), style="dim" if not ins.samples else "")
        if len(hot) > self.max_lines:
            console.print(Text(f"  ({len(hot) - self.max_lines} more lines; --limit shows more)", style="dim"))
