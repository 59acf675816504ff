"""deepctx: the command-line client of deepctxd."""

from __future__ import annotations

import argparse
import sys

from deepctx.cli.client import CliError, socket_path
from deepctx.cli.commands import (
    analyze,
    attach,
    diff,
    export,
    fleet,
    profile,
    ps,
    report,
    run,
    status,
    stop,
    top,
)

COMMANDS = (attach, ps, status, stop, report, analyze, export, diff, run, top, profile, fleet)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deepctx", description="Context-aware profiler for deep-learning workloads.")
    p.add_argument("--socket", help="deepctxd's socket (default $DEEPCTX_SOCKET or /run/deepctx/deepctxd.sock)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in COMMANDS:
        mod.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.socket_path = socket_path(args.socket)
    try:
        return int(args.run(args))
    except CliError as e:
        print(f"deepctx: {e.message}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        print("deepctx: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
