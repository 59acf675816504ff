"""deepctx status: the daemon's targets, probes, rates and lost events."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping

import grpc
from google.protobuf.json_format import MessageToDict
from rich.table import Table
from rich.text import Text

from deepctx.cli.client import CliError, connect, rpc_error
from deepctx.cli.escape import literal
from deepctx.cli.formats.terminal import fitted_table
from deepctx.cli.view_args import view_console
from deepctx.host.file_cache_status import STATUS_PREFIX as HOST_CACHE  # not file_cache's: numpy at CLI start
from deepctx.profiles.lost import lost_counters
from deepctx.proto.v1 import deepctx_pb2 as pb


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show the daemon's state")
    p.add_argument("--format", choices=["text", "json"], default="text",
                   help="text: for people (default); json: every field, for scripts")
    p.add_argument("--wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for the daemon to come up (default 0: ask once)")
    p.set_defaults(run=run)


def _status(args: argparse.Namespace) -> pb.StatusReply:
    deadline = time.monotonic() + args.wait
    while True:
        try:
            # a daemon that accepts the connection gets connect's full answer time, however short --wait is:
            # a busy one (setting up captures on a loaded machine) is not "not running"
            return connect(args.socket_path).Status(pb.StatusRequest())
        except CliError:
            if time.monotonic() >= deadline:
                raise
        except grpc.RpcError as e:
            raise rpc_error(e, args.socket_path) from None
        time.sleep(0.1)  # polling for a daemon that is starting; not synchronization between our threads


LOST_SOURCES = ("cpu", "python", "gpu", "device")


def lost_text(stats: Mapping[str, int]) -> str:
    """The LOST column: lost and dropped events by the part of the capture that lost them, e.g.
    "cpu 3, python 2, device 1"; "0" when nothing was lost."""
    by_source: dict[str, int] = {}
    for k, v in lost_counters(stats).items():
        source = k.split("_", 1)[0]
        source = source if source in LOST_SOURCES else "other"
        by_source[source] = by_source.get(source, 0) + v
    order = (*LOST_SOURCES, "other")
    return ", ".join(f"{s} {by_source[s]}" for s in order if s in by_source) or "0"


def host_cache_lines(totals: Mapping[str, int]) -> list[str]:
    """The host cache's totals (host_cache_*, host/file_cache.py) in two short lines; every counter is in
    --format json. None from a daemon that does not report them."""
    c = {k[len(HOST_CACHE):]: v for k, v in totals.items() if k.startswith(HOST_CACHE)}
    if not c:
        return []
    held = f"{c.get('bytes', 0) / 2**20:.1f} of {c.get('budget_bytes', 0) / 2**20:.1f} MiB"
    return [f"host cache: {c.get('entries', 0)} entries, {held}",
            f"  {c.get('hits', 0)} hits, {c.get('misses', 0)} misses, {c.get('builds', 0)} builds, "
            f"{c.get('evictions', 0)} evictions"]


UNWIND_PREWARM = "unwind_prewarm_"  # daemon/service.py: prewarm_unwind_placements' figures


def unwind_prewarm_line(totals: Mapping[str, int]) -> list[str]:
    """The start's placement of recently used files' unwind rows (prewarm_unwind_files), in one line; none
    from a daemon that does not report it."""
    c = {k[len(UNWIND_PREWARM):]: int(v) for k, v in totals.items() if k.startswith(UNWIND_PREWARM)}
    if not c:
        return []
    if not c.get("done"):
        return ["unwind prewarm: running"]
    return [f"unwind prewarm: {c.get('files', 0)} tables, {c.get('rows', 0) / 1e6:.1f} M rows placed in "
            f"{c.get('ms', 0) / 1000:.2f} s ({c.get('cpu_ms', 0) / 1000:.2f} CPU-s)"]


SYMBOL_PREWARM = "symbol_prewarm_"  # daemon/service.py: prewarm_symbols' figures


def symbol_prewarm_line(totals: Mapping[str, int]) -> list[str]:
    """The start's build of recently used files' symbol tables (prewarm_symbol_files), in one line; none from
    a daemon that does not report it."""
    c = {k[len(SYMBOL_PREWARM):]: int(v) for k, v in totals.items() if k.startswith(SYMBOL_PREWARM)}
    if not c:
        return []
    if not c.get("done"):
        return ["symbol prewarm: running"]
    return [f"symbol prewarm: {c.get('files', 0)} tables built in {c.get('ms', 0) / 1000:.2f} s "
            f"({c.get('cpu_ms', 0) / 1000:.2f} CPU-s), {c.get('passed', 0)} passed over"]


SESSION_COLUMNS = ("SESSION", "PID", "STATE", "RATE", "PROBES", "ELAPSED", "SAMPLES", "LOST", "COMMAND")


def session_table(rows: list[list[str | Text]], width: int) -> Table:
    """No column wraps: a narrow terminal cuts the command at its end, then leaves out PROBES, RATE and
    SAMPLES (ps and the daemon's log have them); SESSION, PID, STATE, ELAPSED, LOST stay."""
    return fitted_table(list(SESSION_COLUMNS), rows, width, left=SESSION_COLUMNS,
                        optional=("PROBES", "RATE", "SAMPLES"))


def run(args: argparse.Namespace) -> int:
    st = _status(args)
    if args.format == "json":
        print(json.dumps(MessageToDict(st, preserving_proto_field_name=True, always_print_fields_with_no_presence=True),
                         indent=1))
        return 0
    con = view_console()
    con.print(f"[bold]deepctxd[/] {st.version}  pid {st.daemon_pid}  up {st.uptime_s:.0f} s  "
              f"kernel {st.kernel}  bcc {st.bcc_version}")
    con.print(f"socket {st.socket}  default rate {st.default_sample_hz} Hz (max {st.max_sample_hz})  "
              f"max duration {st.max_duration_s:g} s")
    totals = ", ".join(f"{k} {v}" for k, v in sorted(st.totals.items())
                       if not k.startswith((HOST_CACHE, UNWIND_PREWARM)))
    con.print(f"totals: {totals}")
    prewarm = unwind_prewarm_line(st.totals) + symbol_prewarm_line(st.totals)
    for line in host_cache_lines(st.totals) + prewarm:
        con.print(line)
    if not st.sessions:
        con.print("no captures running")
        return 0
    now = time.time()
    rows = [[str(s.id), str(s.pid), literal(s.state), f"{s.sample_hz} Hz", literal(",".join(s.probes)),
             f"{now - s.started_unix:.0f}/{s.duration_s:g} s", str(s.stats.get("cpu_samples", 0)),
             lost_text(s.stats), literal(s.command)] for s in st.sessions]
    con.print(session_table(rows, con.width))
    for s in st.sessions:
        lost = lost_counters(s.stats)
        if lost:
            con.print(f"session {s.id} (pid {s.pid}) lost: " + ", ".join(f"{k} {v}" for k, v in lost.items()),
                      highlight=False, markup=False, soft_wrap=True)
        for w in s.warnings:
            line = literal(f"session {s.id} (pid {s.pid}): ", style="yellow")
            line.append_text(literal(w))  # warnings quote the target: escaped, not markup
            con.print(line)
    return 0
