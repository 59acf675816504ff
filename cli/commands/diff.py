"""deepctx diff BEFORE AFTER: per call path and per kernel, what grew, shrank, appeared and vanished."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.text import Text

from deepctx.cli.client import CliError
from deepctx.cli.commands.report import console_for
from deepctx.cli.formats.diff_changes import DiffChanges
from deepctx.cli.formats.diff_table import DiffTables
from deepctx.cli.output import write_output
from deepctx.cli.view_args import add_fold_arguments, fold_of
from deepctx.cli.views.diff import DiffNode, diff_tree
from deepctx.cli.views.diff_significance import ROLLUPS, significance
from deepctx.cli.views.document import DocumentError, load
from deepctx.profiles.metrics import DEFAULT_SORT_ORDER
from deepctx.profiles.tree import from_doc, pick_metric


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="compare two profiles: call paths and kernels that grew, shrank, appeared, vanished",
                       description="Compare two saved profiles of the same program.")
    p.add_argument("before", help="the baseline profile (JSON, as attach -o or report writes it)")
    p.add_argument("after", help="the profile compared with it")
    p.add_argument("--sort", metavar="METRIC", help="metric compared per call path (default: the first measured)")
    p.add_argument("--limit", type=int, default=30, help="rows per table (default 30)")
    p.add_argument("--by", choices=ROLLUPS, default="function",
                   help="compare per function (default), per line, or per whole call path")
    p.add_argument("--absolute", action="store_true",
                   help="compare absolute values (default: each side's share of its own total, so captures of "
                        "other lengths or rates compare alike)")
    p.add_argument("--show-noise", action="store_true",
                   help="also list the changes within sampling noise (default: only counted)")
    add_fold_arguments(p)
    p.add_argument("--width", type=int, help="render for this many columns (default: the terminal's; output that "
                                            "is not a terminal is not cut)")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                   help="colour gains and losses (auto, the default: when stdout is a terminal and NO_COLOR is "
                        "unset)")
    p.add_argument("--html", metavar="OUT", help="write a self-contained HTML diff report here instead")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        before, after = load(args.before), load(args.after)
    except DocumentError as e:
        raise CliError(str(e), 2) from None
    fold = fold_of(args)  # both sides alike, so their call paths match
    after_root = from_doc(after, fold)
    root = diff_tree(from_doc(before, fold), after_root)
    try:
        metric = pick_metric(after_root, args.sort) if args.sort else _default_metric(root)
    except KeyError:
        raise CliError(f"--sort {args.sort}: no such metric", 2) from None
    if args.html:
        from deepctx.cli.formats.html import HtmlReport

        write_output(args.html, HtmlReport(fold=fold).render_diff(before, after, metric))
        if args.html != "-":
            Console(stderr=True).print(f"diff report written to {args.html}")
        return 0
    console = console_for(args)
    changes, warning = significance(before, after, metric, args.by, not args.absolute)
    if warning:
        console.print(Text(f"warning: {warning}", style="bold yellow"), overflow="fold")
    DiffTables().render(before, after, root, metric, args.limit, console, paths=False)
    DiffChanges().render(changes, args.limit, console, args.show_noise)
    return 0


def _default_metric(root: DiffNode) -> str:
    for m in DEFAULT_SORT_ORDER:
        if root.before_total.get(m) or root.after_total.get(m):
            return m
    return "cpu_samples"
