"""deepctx top: the busiest processes, GPU kernels and Python lines on this host, from continuous mode's
window store; refreshes in place until Ctrl-C on a terminal (`--once`, or stdout that is not a terminal,
prints one table and exits, for scripts)."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
from rich.live import Live

from deepctx.cli.client import CliError, connect, rpc_error
from deepctx.cli.durations import parse_span
from deepctx.cli.formats.top_table import TopData, renderable
from deepctx.cli.view_args import view_console
from deepctx.host.signals import Interrupt, wait_in_slices
from deepctx.profiles.metrics import METRICS
from deepctx.proto.v1 import deepctx_pb2 as pb

QUERY_TIMEOUT_S = 60.0  # a query over the store's windows; a daemon that takes longer is named, not waited on


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
    # Ctrl-C sets `stopped` rather than raising KeyboardInterrupt wherever the main thread happens to be (in
    # rich's rendering); a query in flight is then cancelled, not waited for (a CI run saw `top` still
    # running 30 s after SIGINT: a call with no deadline, waiting on a daemon that did not answer)
    stopped = Interrupt()
    wake = threading.Event()

    def fetch() -> TopData | None:
        """The daemon's answer, or None when Ctrl-C came first."""
        request = pb.TopRequest(since_unix=time.time() - span, n=args.n, sort=args.sort or "")
        wake.clear()
        if stopped.hit:
            return None
        call = stub.Top.future(request, timeout=QUERY_TIMEOUT_S)
        call.add_done_callback(lambda _: wake.set())  # gRPC's thread: not the handler's
        wait_in_slices(stopped, wake)
        if stopped.hit and not call.done():
            call.cancel()
            return None
        try:
            return from_reply(call.result())
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise CliError(f"deepctxd did not answer the query within {QUERY_TIMEOUT_S:g} s: it may be "
                               f"overloaded or stuck; see its log (`journalctl -u deepctxd`)", 3) from None
            if e.code() == grpc.StatusCode.CANCELLED and stopped.hit:
                return None
            raise rpc_error(e, args.socket_path) from None

    previous = signal.signal(signal.SIGINT, stopped)
    try:
        return show(args, fetch, stopped)
    finally:
        signal.signal(signal.SIGINT, previous)


def show(args: argparse.Namespace, fetch: Callable[[], TopData | None], stopped: Interrupt) -> int:
    first = fetch()
    if first is None:  # Ctrl-C before anything was shown: main() says "interrupted"
        raise KeyboardInterrupt
    if args.format == "json":
        print(json.dumps(first, indent=1))
        return 0
    console = view_console()
    if args.once or not console.is_terminal:  # piped or redirected: nobody to press Ctrl-C, nothing to redraw
        console.print(renderable(first, width=console.width))
        return 0
    with Live(renderable(first, width=console.width), console=console, auto_refresh=False, screen=False) as live:
        while not wait_in_slices(stopped, seconds=args.interval):  # the refresh period, not synchronization
            data = fetch()
            if data is None:
                break
            live.update(renderable(data, width=console.width), refresh=True)
    return 0
