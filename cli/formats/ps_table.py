"""`deepctx ps` as a table: PID, USER and PYTHON always whole; GPU LIBRARIES and COMMAND share the rest,
each cut at its end (never wrapped). Output that is not a terminal gets its full width (cli/view_args.py)."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from deepctx.cli.escape import literal

COLUMNS = ("PID", "USER", "PYTHON", "GPU LIBRARIES", "COMMAND")
COMMAND_MIN = 24  # the command keeps at least this much; GPU LIBRARIES gives way first
LIBS_SHARE = 0.35  # of what PID, USER and PYTHON leave


def cells(r: dict[str, Any]) -> list[Text]:
    # every text cell as literal Text: escaped, never parsed as markup (the target chose its argv)
    return [Text(f"{r['pid']}{' *' if r['profiled'] else ''}"), literal(r["user"]), literal(r["python"] or "-"),
            literal(", ".join(r["gpu_libraries"]) or "-"), literal(r["command"])]


def table(rows: list[dict[str, Any]], width: int) -> Table:
    body = [cells(r) for r in rows]
    need = [max([len(c)] + [cell_len(row[i].plain) for row in body]) for i, c in enumerate(COLUMNS)]
    fixed = sum(need[:3]) + 4 * 2  # columns are two cells apart
    rest = max(0, width - fixed)
    libs = min(need[3], max(len("GPU LIBRARIES"), int(rest * LIBS_SHARE), rest - max(COMMAND_MIN, need[4])))
    command = max(COMMAND_MIN, rest - libs)
    t = Table(box=None, padding=(0, 2, 0, 0), pad_edge=False, show_edge=False)
    for i, col in enumerate(COLUMNS[:3]):
        t.add_column(col, no_wrap=True, min_width=need[i], justify="right" if col == "PID" else "left")
    t.add_column(COLUMNS[3], no_wrap=True, overflow="ellipsis", width=libs)
    t.add_column(COLUMNS[4], no_wrap=True, overflow="ellipsis", max_width=command)
    for row in body:
        t.add_row(*row)
    return t
