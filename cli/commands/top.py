"""deepctx top: the busiest processes, GPU kernels and Python lines on this host, from continuous mode's
window store; refreshes in place until Ctrl-C on a terminal (`--once`, or stdout that is not a terminal,
prints one table and exits, for scripts)."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from typing import Any

import grpc
from rich.live import Live

from deepctx.cli.client import CliError, connect, rpc_error
from deepctx.cli.durations import parse_span
from deepctx.cli.formats.top_table import TopData, renderable
from deepctx.cli.view_args import view_console
from deepctx.profiles.metrics import METRICS
from deepctx.proto.v1 import deepctx_pb2 as pb


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("top", help="the busiest processes, kernels and lines (continuous mode)",
                       description="The busiest processes, GPU kernels and Python lines over the last while, "
                                   "from the windows continuous mode stored.")
    p.add_argument("--since", default="5m", help="how far back (e.g. 30s, 10m, 1h; default 5m)")
    p.add_argument("-n", type=int, default=10, help="rows per table (default 10)")
    p.add_argument("--sort", choices=METRICS, help="metric that ranks processes and lines "
                                                   "(default: GPU time, else CPU samples)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    p.add_argument("--once", action="store_true", help="print once and exit (default: refresh until Ctrl-C when stdout is a terminal, "
                                                    "else print once)")
    p.add_argument("--format", choices=["text", "json"], default="text",
                   help="text: a table for people (default); json: for scripts (implies --once)")
    p.set_defaults(run=run)


def from_reply(r: pb.TopReply) -> TopData:
    def metrics(m: Any) -> dict[str, int]:
        return {k: int(v) for k, v in sorted(m.items())}

    return {
        "since_unix": r.since_unix, "until_unix": r.until_unix, "windows": r.windows, "sort": r.sort,
        "kernel_sort": r.kernel_sort,
        "processes": [{"host": p.host, "pid": p.pid, "command": p.command, "container": p.container,
                       "windows": p.windows, "metrics": metrics(p.metrics)} for p in r.processes],
        "kernels": [{"name": k.name, "processes": k.processes, "metrics": metrics(k.metrics)} for k in r.kernels],
        "lines": [{"file": ln.file, "line": ln.line, "function": ln.function, "metrics": metrics(ln.metrics)}
                  for ln in r.lines],
    }


def run(args: argparse.Namespace) -> int:
    try:
        span = parse_span(args.since)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    if not 1 <= args.n <= 1000:
        raise CliError(f"-n must be within [1, 1000], not {args.n}", 2)
    if not args.interval > 0:
        raise CliError("--interval must be more than 0 seconds", 2)
    stub = connect(args.socket_path)

    def fetch() -> TopData:
        try:
            return from_reply(stub.Top(pb.TopRequest(since_unix=time.time() - span, n=args.n, sort=args.sort or "")))
        except grpc.RpcError as e:
            raise rpc_error(e, args.socket_path) from None

    if args.format == "json":
        print(json.dumps(fetch(), indent=1))
        return 0
    console = view_console()
    if args.once or not console.is_terminal:  # piped or redirected: nobody to press Ctrl-C, nothing to redraw
        console.print(renderable(fetch(), width=console.width))
        return 0
    # Ctrl-C sets `stop` rather than raising KeyboardInterrupt wherever the main thread happens to be (in a
    # gRPC call, in rich's rendering): a CI run once saw `top` still running 30 s after SIGINT
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        with Live(renderable(fetch(), width=console.width), console=console, auto_refresh=False, screen=False) as live:
            while not stop.wait(args.interval):  # the refresh period, not synchronization
                data = fetch()
                if not stop.is_set():
                    live.update(renderable(data, width=console.width), refresh=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    return 0
