"""deepctx: the command-line client of deepctxd."""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from deepctx.cli.client import CliError, socket_path

# each is cli/commands/NAME.py, whose add_parser adds the command NAME; imported when its parser is built
COMMANDS = ("attach", "ps", "status", "stop", "report", "analyze", "export", "diff", "run", "top", "profile", "fleet")


def command_module(name: str) -> ModuleType:
    return importlib.import_module(f"deepctx.cli.commands.{name}")


def command_of(argv: list[str]) -> str | None:
    """The command argv names after deepctx's own options, or None (none, --help, an unknown name): then
    every command's parser is built, for the list of commands or argparse's error."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--socket":
            i += 2
        elif a.startswith("--socket="):
            i += 1
        else:
            return a if a in COMMANDS else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """deepctx's parser; with only, the parser of that command alone: a command's start imports its own
    module, not the others' (the analyzer, ClickHouse's client, the views: CPU at every run, #35.7)."""
    p = argparse.ArgumentParser(prog="deepctx", description="Context-aware profiler for deep-learning workloads.")
    p.add_argument("--socket", help="deepctxd's socket (default $DEEPCTX_SOCKET or /run/deepctx/deepctxd.sock)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS if only is None else (only,):
        command_module(name).add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(command_of(argv)).parse_args(argv)
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
