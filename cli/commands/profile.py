"""deepctx profile: one profile merged from the windows continuous mode stored for a process, a command
or a container over a time range."""

from __future__ import annotations

import argparse
import sys

import grpc
from rich.console import Console

from deepctx.cli.client import CliError, connect, rpc_error
from deepctx.cli.durations import moment
from deepctx.cli.formats import json_file, tree
from deepctx.cli.view_args import add_fold_arguments, fold_of, view_console
from deepctx.profiles.document import to_doc
from deepctx.profiles.metrics import RANK_ORDER
from deepctx.proto.v1 import deepctx_pb2 as pb

# The metric the tree shows when none is asked for: the first with a nonzero total, as in every view.
TREE_ORDER = RANK_ORDER


def add_selection(p: argparse.ArgumentParser, since_default: str) -> None:
    """The options that pick windows (shared with `deepctx fleet profile`)."""
    p.add_argument("--pid", type=int, help="windows of this process")
    p.add_argument("--command", help="windows whose command line contains this text")
    p.add_argument("--container", help="windows of this container (id, short id or cgroup path)")
    p.add_argument("--since", default=since_default, help=f"from how long ago (e.g. 10m, 2h; default {since_default}),"
                                                          " or @UNIXTIME")
    p.add_argument("--until", help="to how long ago (default now), or @UNIXTIME")


def add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=["tree", "json"], default="tree",
                   help="tree: the top-down tree on the terminal (default); json: the profile document (docs/formats.md)")
    p.add_argument("-o", "--output", help="write the profile here (JSON; gzipped when it ends in .gz) instead of stdout")
    p.add_argument("--metric", choices=TREE_ORDER, help="tree: the metric shown (default: GPU time, else CPU samples)")
    p.add_argument("--min-percent", type=float, default=0.5, help="tree: hide nodes below this share of the total, in percent (default 0.5)")
    p.add_argument("--depth", type=int, default=64, help="tree: deepest level shown (default 64)")
    add_fold_arguments(p)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="merged profile of stored windows (continuous mode)",
                       description="One profile merged from the windows continuous mode stored: the same call "
                                   "path in several windows adds up.")
    add_selection(p, "10m")
    add_output(p)
    p.set_defaults(run=run)


def time_range(args: argparse.Namespace) -> tuple[float, float]:
    try:
        since, until = moment(args.since), moment(args.until)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    if until <= since:
        raise CliError("--until must be later than --since", 2)
    return since, until


def show(doc: dict, args: argparse.Namespace) -> None:
    err = Console(stderr=True)
    if args.format == "json" or args.output:
        json_file.write(doc, args.output)
        if args.output:
            err.print(f"profile of {doc['stats'].get('windows', 0)} windows written to {args.output}")
    if args.format == "tree":
        # without --metric the tree takes the first of TREE_ORDER with a nonzero total (tree.render: pick_metric)
        tree.render(doc, metric=args.metric, min_percent=args.min_percent, max_depth=args.depth, console=view_console(),
                    fold=fold_of(args))


def run(args: argparse.Namespace) -> int:
    since, until = time_range(args)
    req = pb.QueryProfileRequest(since_unix=since, until_unix=until, command=args.command or "",
                                 container=args.container or "")
    if args.pid is not None:
        req.pid = args.pid
    stub = connect(args.socket_path)
    try:
        reply = stub.QueryProfile(req)
    except grpc.RpcError as e:
        raise rpc_error(e, args.socket_path) from None
    if not reply.HasField("profile"):
        print("deepctx: no stored windows match (continuous mode keeps them; see `deepctx top`)", file=sys.stderr)
        return 1
    show(to_doc(reply.profile), args)
    return 0
