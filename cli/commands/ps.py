"""deepctx ps: processes worth profiling."""

from __future__ import annotations

import argparse
import json

import grpc

from deepctx.cli.client import connect, rpc_error
from deepctx.cli.formats.ps_table import table
from deepctx.cli.view_args import view_console
from deepctx.proto.v1 import deepctx_pb2 as pb


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ps", help="list processes worth profiling (Python, GPU runtimes)")
    p.add_argument("--all", action="store_true", help="every user-space process")
    p.add_argument("--format", choices=["table", "json"], default="table",
                   help="table: one row per process (default); json: every field, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    stub = connect(args.socket_path)
    try:
        reply = stub.ListProcesses(pb.ListProcessesRequest(all=args.all))
    except grpc.RpcError as e:
        raise rpc_error(e, args.socket_path) from None
    rows = [{"pid": p.pid, "user": p.user, "command": p.command, "python": p.python_version or None,
             "gpu_libraries": list(p.gpu_libraries), "profiled": p.profiled} for p in reply.processes]
    if args.format == "json":
        print(json.dumps(rows, indent=1))
        return 0
    console = view_console()
    console.print(table(rows, console.width))
    if not rows:
        print("no Python or GPU processes found (deepctx ps --all lists every process)")
    return 0
