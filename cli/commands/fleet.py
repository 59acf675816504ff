"""deepctx fleet top | profile: the same views as `deepctx top` and `deepctx profile`, for every host
that exports its windows to ClickHouse (docs/fleet.md). Queries ClickHouse directly; no daemon needed.

ClickHouse is found through --clickhouse URL, else $DEEPCTX_CLICKHOUSE, else (for root and the `deepctx`
group only) clickhouse_url in /etc/deepctx/deepctxd.toml.

The fleet tables hold every user's windows, and ClickHouse, not this command, decides who reads them. The
daemon's URL (and any credentials in it) is the daemon's, which exports every user's windows: it is used
for those who may see every process anyway (root, the `deepctx` group). Anyone else brings a ClickHouse
account of their own, whose grants or row policies (on the `uid` column) say what it reads."""

from __future__ import annotations

import argparse
import grp
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import tomllib

from deepctx.cli.client import CliError
from deepctx.cli.commands.profile import add_output, add_selection, show, time_range
from deepctx.cli.durations import parse_span
from deepctx.cli.formats.top_table import TopData, renderable
from deepctx.cli.view_args import view_console
from deepctx.host.identity import GROUP
from deepctx.profiles.fleet import schema
from deepctx.profiles.fleet.clickhouse import ClickHouse, ClickHouseError
from deepctx.profiles.metrics import KERNEL_METRICS, METRICS, PROCESS_METRICS, kernel_rank_metric, rank_metric

DAEMON_CONFIG = "/etc/deepctx/deepctxd.toml"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="top and profiles across hosts, from ClickHouse",
                       description="Views across every host that exports windows to ClickHouse.")
    p.add_argument("--clickhouse", metavar="URL", help="ClickHouse's HTTP interface (default $DEEPCTX_CLICKHOUSE, "
                                                       f"else clickhouse_url in {DAEMON_CONFIG})")
    p.add_argument("--database", help="database (default deepctx, or clickhouse_database in the daemon's config)")
    fsub = p.add_subparsers(dest="fleet_command", required=True, metavar="COMMAND")
    top = fsub.add_parser("top", help="the busiest processes, kernels and lines across hosts")
    top.add_argument("--since", default="1h", help="how far back (default 1h)")
    top.add_argument("--host", help="one host only")
    top.add_argument("-n", type=int, default=10, help="rows per table (default 10)")
    top.add_argument("--sort", choices=METRICS, help="metric that ranks processes and lines")
    top.add_argument("--format", choices=["text", "json"], default="text",
                     help="text: a table for people (default); json: for scripts")
    top.set_defaults(run=run_top)
    prof = fsub.add_parser("profile", help="one profile merged across hosts and windows")
    prof.add_argument("--host", help="one host only")
    add_selection(prof, "1h")
    add_output(prof)
    prof.set_defaults(run=run_profile)


def _daemon_config() -> dict[str, Any]:
    try:
        return tomllib.loads(Path(DAEMON_CONFIG).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def may_use_daemon_account() -> bool:
    """Root and members of the `deepctx` group, who see every user's processes through deepctxd too."""
    if os.geteuid() == 0:
        return True
    try:
        gid = grp.getgrnam(GROUP).gr_gid
    except KeyError:
        return False
    return gid == os.getegid() or gid in os.getgroups()


def client(args: argparse.Namespace) -> ClickHouse:
    url = args.clickhouse or os.environ.get("DEEPCTX_CLICKHOUSE") or ""
    cfg = _daemon_config() if not url or not args.database else {}
    if not url:
        if not may_use_daemon_account():
            raise CliError("no ClickHouse to ask: pass --clickhouse URL or set DEEPCTX_CLICKHOUSE with your own "
                           f"ClickHouse account (the daemon's, in {DAEMON_CONFIG}, is for root and the `{GROUP}` "
                           "group: it reads every user's windows)", 2)
        url = str(cfg.get("clickhouse_url") or "")
    if not url:
        raise CliError(f"no ClickHouse to ask: pass --clickhouse URL, set DEEPCTX_CLICKHOUSE, or set clickhouse_url "
                       f"in {DAEMON_CONFIG}", 2)
    try:
        return ClickHouse(url, args.database or str(cfg.get("clickhouse_database") or "deepctx"))
    except ValueError as e:
        raise CliError(str(e), 2) from None


def _ints(row: dict[str, Any], names: tuple[str, ...], prefix: str = "") -> dict[str, int]:
    return {m: int(row.get(prefix + m) or 0) for m in names}


def fleet_top(ch: ClickHouse, since: float, until: float, n: int, host: str | None = None,
              sort: str | None = None) -> TopData:
    cond = schema.where(since, until, host=host)
    db = ch.database
    totals = _ints(ch.rows(schema.totals_query(db, cond))[0], PROCESS_METRICS, "t_")
    metric, kmetric = rank_metric(totals, sort), kernel_rank_metric(totals, sort)
    procs = ch.rows(schema.processes_query(db, cond, metric, n))
    # Every window in the range, of every process: distinct (host, pid, window_start), one per window however
    # many call path rows it has, and not only the windows of the n processes shown.
    heads = ch.rows(schema.header_query(db, cond))
    return {
        "since_unix": since, "until_unix": until, "sort": metric, "kernel_sort": kmetric,
        "windows": int(heads[0]["h_windows"] or 0) if heads else 0,
        "processes": [{"host": p["host"], "pid": int(p["pid"]), "command": p["command"], "container": p["container"],
                       "windows": int(p["windows"]), "metrics": _ints(p, PROCESS_METRICS, "t_")} for p in procs],
        "kernels": [{"name": k["name"], "processes": int(k["processes"]), "metrics": _ints(k, KERNEL_METRICS)}
                    for k in ch.rows(schema.kernels_query(db, cond, kmetric, n))],
        "lines": [{"file": ln["file"], "line": int(ln["line"]), "function": ln["function"],
                   "metrics": _ints(ln, METRICS)} for ln in ch.rows(schema.lines_query(db, cond, metric, n))],
    }


def run_top(args: argparse.Namespace) -> int:
    try:
        span = parse_span(args.since)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    if not 1 <= args.n <= 1000:
        raise CliError(f"-n must be within [1, 1000], not {args.n}", 2)
    now = time.time()
    try:
        data = fleet_top(client(args), now - span, now, args.n, args.host, args.sort)
    except ClickHouseError as e:
        raise CliError(str(e)) from None
    if args.format == "json":
        print(json.dumps(data, indent=1))
    else:
        console = view_console()
        console.print(renderable(data, title="deepctx fleet top", show_host=True, width=console.width))
    return 0


def run_profile(args: argparse.Namespace) -> int:
    since, until = time_range(args)
    ch = client(args)
    cond = schema.where(since, until, host=args.host, pid=args.pid, command=args.command, container=args.container)
    try:
        rows = ch.rows(schema.profile_query(ch.database, cond))
        heads = ch.rows(schema.header_query(ch.database, cond))
    except ClickHouseError as e:
        raise CliError(str(e)) from None
    h = {k.removeprefix("h_"): v for k, v in (heads[0] if heads else {}).items()}
    if not rows or not int(h.get("windows") or 0):
        print("deepctx: no windows in ClickHouse match", file=sys.stderr)
        return 1
    first, last = float(h["first"]), float(h["last"])
    header = {"windows": h["windows"], "started_unix": first, "duration_s": last - first,
              "hostname": h["host"] if int(h["hosts"]) == 1 else "",
              "pid": h["pid"] if int(h["pids"]) == 1 else 0,
              "command": h["command"] if int(h["commands"]) == 1 else f"[{h['processes']} processes]"}
    show(schema.tree_from_paths(rows, header), args)
    return 0
