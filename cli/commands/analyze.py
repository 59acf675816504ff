"""deepctx analyze PID|FILE: find known inefficiencies in a profile (docs/analyzer.md)."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from deepctx.cli.client import CliError
from deepctx.cli.escape import literal
from deepctx.cli.formats import json_file
from deepctx.cli.formats.findings import FindingsText
from deepctx.cli.output import write_output
from deepctx.cli.view_args import view_console
from deepctx.cli.views.document import DocumentError, load
from deepctx.profiles.analyzer import Limits, annotate, rule_ids


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="find inefficiencies in a profile, with fixes and estimated speedups",
                       description="Analyze a saved profile (FILE), or capture process PID through deepctxd "
                                   "first (like attach), and report what slows it down.")
    p.add_argument("target", metavar="PID|FILE", help="a profile written by `deepctx attach -o FILE`, or a pid")
    p.add_argument("--format", choices=["text", "json"], default="text",
                   help="text (default), or json: the profile document with `findings` and `analysis` added")
    p.add_argument("-o", "--output", help="write here instead of stdout (gzipped when it ends in .gz)")
    p.add_argument("--duration", type=float, default=10.0, help="with a PID: seconds to capture (default 10)")
    p.add_argument("--rate", type=int, default=0, dest="sample_hz", help="with a PID: CPU samples per second (default: the daemon's, 99)")
    p.add_argument("--save", metavar="FILE", help="with a PID: also write the captured profile here")
    p.add_argument("--min-speedup", type=float, default=Limits().min_speedup,
                   help=f"leave out findings estimated below this speedup (default {Limits().min_speedup})")
    p.add_argument("--rules", metavar="R1,R2", help=f"only these rules ({', '.join(rule_ids())})")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=run)


def is_pid(target: str) -> bool:
    return target.isdigit() and not Path(target).exists()


def capture(args: argparse.Namespace) -> dict[str, Any]:
    from deepctx.cli.client import connect
    from deepctx.cli.commands.attach import attach_request, check_rate  # the daemon's client, only for a PID
    from deepctx.cli.commands.attach import capture as attach_capture
    from deepctx.profiles.document import to_doc

    check_rate(args.sample_hz)
    stub = connect(args.socket_path)
    req = attach_request(int(args.target), args.duration, sample_hz=args.sample_hz)
    profile = attach_capture(stub, req, args.socket_path, show_progress=not args.quiet and sys.stderr.isatty())
    return to_doc(profile)


def run(args: argparse.Namespace) -> int:
    rules = [r.strip() for r in args.rules.split(",") if r.strip()] if args.rules else None
    if rules:
        unknown = [r for r in rules if r not in rule_ids()]
        if unknown:
            raise CliError(f"--rules: no rule named {', '.join(unknown)} (rules: {', '.join(rule_ids())})", 2)
    if is_pid(args.target):
        doc = capture(args)
        if args.save:
            json_file.write(doc, args.save)
    else:
        try:
            doc = load(args.target)
        except DocumentError as e:
            raise CliError(str(e), 2) from None
    annotate(doc, Limits(min_speedup=args.min_speedup), rules)
    if args.format == "json":
        json_file.write(doc, args.output)
        return 0
    if args.output and args.output != "-":
        out = io.StringIO()
        FindingsText().render(doc, Console(file=out, width=120, no_color=True, highlight=False, soft_wrap=False))
        write_output(args.output, out.getvalue())
        if not args.quiet:
            Console(stderr=True).print(f"findings written to {args.output}")
        return 0
    console = view_console()  # rich leaves colour out where NO_COLOR is set
    console.print(literal(f"{doc.get('command') or '?'}  pid {doc.get('pid')}", style="bold"), overflow="fold")
    FindingsText().render(doc, console)
    return 0
