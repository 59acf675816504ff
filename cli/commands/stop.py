"""deepctx stop PID: end the captures of a process now (their clients still get the profile)."""

from __future__ import annotations

import argparse

import grpc

from deepctx.cli.client import connect, rpc_error
from deepctx.proto.v1 import deepctx_pb2 as pb


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stop", help="end the captures of a process now")
    p.add_argument("pid", type=int, help="the process whose captures end now")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    stub = connect(args.socket_path)
    try:
        reply = stub.Stop(pb.StopRequest(pid=args.pid))
    except grpc.RpcError as e:
        raise rpc_error(e, args.socket_path) from None
    print(f"stopped {reply.stopped} capture{'s' if reply.stopped != 1 else ''} of process {args.pid}")
    return 0
