"""deepctx export FILE --to FORMAT -o OUT: the profile in another tool's format (docs/formats.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deepctx.cli.client import CliError
from deepctx.cli.formats.exporter import exporters
from deepctx.cli.output import write_output
from deepctx.cli.view_args import add_fold_arguments, fold_of
from deepctx.cli.views.document import DocumentError, load
from deepctx.profiles.exporter import ExportOptions

FORMATS = ("pprof", "speedscope", "chrome", "hatchet", "folded")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="convert a profile: pprof, speedscope, chrome (Perfetto), hatchet, folded",
                       description="Convert a saved profile into another tool's format.")
    p.add_argument("file", help="a profile written by `deepctx attach -o FILE` (JSON, optionally gzipped)")
    p.add_argument("--to", choices=FORMATS, required=True, dest="format",
                   help="the format written (required): " + ", ".join(FORMATS))
    p.add_argument("-o", "--output", help="output file (default: FILE's name with the format's ending; '-' for stdout)")
    p.add_argument("--metric", help="folded, speedscope, hatchet: only this metric (default: all measured; "
                                    "folded: the first measured)")
    add_fold_arguments(p)  # every format folds as report and its HTML do
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        doc = load(args.file)
    except DocumentError as e:
        raise CliError(str(e), 2) from None
    if args.metric and args.metric not in doc["metrics"]:
        raise CliError(f"--metric {args.metric}: the profile has no such metric ({', '.join(doc['metrics'])})", 2)
    exporter = exporters()[args.format]()
    data = exporter.export(doc, ExportOptions(metric=args.metric, fold=fold_of(args)))
    out = args.output or default_output(args.file, exporter.suffix)
    write_output(out, data)
    if out == "-":
        return 0
    print(f"{args.format} written to {out}", file=sys.stderr)
    return 0


def default_output(src: str, suffix: str) -> str:
    name = Path(src).name
    for ending in (".json.gz", ".json", ".gz"):
        if name.endswith(ending):
            name = name[: -len(ending)]
            break
    return str(Path(src).with_name(name + suffix))
