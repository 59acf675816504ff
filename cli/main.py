"""deepctx: the command-line client of deepctxd."""

from __future__ import annotations

import argparse
import importlib
import sys

from deepctx.cli.client import CliError, socket_path

COMMANDS = ("attach", "ps", "status", "stop", "report", "analyze", "export", "diff", "run", "top", "profile", "fleet")


def command_word(argv: list[str]) -> str | None:
    """The command argv names, when it names one before anything else but --socket: only that command's module
    is imported then (each pulls in what its work needs, grpc or the analyzer or numpy, and a command's start
    is part of attach-to-ready); None for help, a typo or no command, which need every command's parser."""
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


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with argv, only the command it names (see command_word) where it names one."""
    p = argparse.ArgumentParser(prog="deepctx", description="Context-aware profiler for deep-learning workloads.")
    p.add_argument("--socket", help="deepctxd's socket (default $DEEPCTX_SOCKET or /run/deepctx/deepctxd.sock)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    word = command_word(argv) if argv is not None else None
    for name in (word,) if word else COMMANDS:
        importlib.import_module(f"deepctx.cli.commands.{name}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
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
