"""deepctx report FILE|--pid PID: top-down, bottom-up and flat views in the terminal, or an HTML report."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from rich.console import Console

from deepctx.cli.client import CliError
from deepctx.cli.formats.compiles import render_compiles
from deepctx.cli.formats.findings import FindingsText
from deepctx.cli.formats.flat_table import FlatTable
from deepctx.cli.formats.terminal import ViewOptions
from deepctx.cli.formats.tree_table import TreeTable
from deepctx.cli.output import PRIVATE_MODE, write_output
from deepctx.cli.view_args import add_fold_arguments, fold_of, view_console
from deepctx.cli.views.bottomup import bottom_up
from deepctx.cli.views.document import DocumentError, load
from deepctx.cli.views.focus import focus_tree
from deepctx.cli.views.python_self import SELF_MODES, default_self_mode, python_leaf_self
from deepctx.profiles.metrics import RANK_ORDER
from deepctx.profiles.tree import ViewNode, from_doc, nonzero_metrics, pick_metric

VIEWS = ("top-down", "bottom-up", "flat", "kernel-lines")
FLAT_LIMIT, KERNEL_LINES = 50, 5  # --limit's defaults: flat rows, kernel-lines lines per kernel


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="show a profile: top-down, bottom-up, flat, or an HTML report",
                       description="Show a saved profile (JSON, optionally gzipped), or capture one with --pid.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("file", nargs="?", help="a profile written by `deepctx attach -o FILE`")
    src.add_argument("--pid", type=int, help="capture this process through deepctxd first (like attach)")
    p.add_argument("--duration", type=float, default=10.0, help="with --pid: seconds to capture (default 10)")
    p.add_argument("--save", metavar="FILE", help="with --pid: also write the captured profile (JSON) here")
    p.add_argument("--view", choices=VIEWS, default="top-down",
                   help="top-down: callers above callees (default); bottom-up: from the frames where the metric "
                        "is spent up to their callers; flat: one row per frame; kernel-lines: each PC-sampled "
                        "kernel's hot source lines and SASS instructions with their stall reasons (--focus: a "
                        "regex on kernel names; --limit: lines per kernel)")
    p.add_argument("--sort", metavar="METRIC",
                   help="metric to sort by and take percentages of (default: the first measured of "
                        f"{', '.join(RANK_ORDER)}: GPU time where the profile has it)")
    p.add_argument("--by", choices=["self", "total"], help="sort by self or total value (default: total; flat: self)")
    p.add_argument("--self-time", choices=SELF_MODES, default=None,
                   help="flat: whose self time a sample is: python, its innermost Python frame's (native code it "
                        "called is charged to it); native, its innermost frame's (default: python for Python "
                        "targets, else native)")
    p.add_argument("--columns", metavar="M1,M2", help="metrics to show (default: every metric measured; 'all')")
    p.add_argument("--focus", metavar="NAME", help="top-down/flat: what frames matching NAME call; "
                                                   "bottom-up: who calls them (regex on names and file:line)")
    p.add_argument("--min-percent", type=float, default=None, help="hide rows below this share (default 0.5; flat 0)")
    p.add_argument("--depth", type=int, default=64, help="deepest tree level shown (default 64)")
    p.add_argument("--limit", type=int, help="flat: at most this many rows (default 50); kernel-lines: lines per "
                                             "kernel (default 5)")
    add_fold_arguments(p)
    p.add_argument("--width", type=int, help="render for this many columns (default: the terminal's; output that "
                                            "is not a terminal is not cut)")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                   help="colour frames by kind (auto, the default: when stdout is a terminal and NO_COLOR is unset)")
    p.add_argument("--html", metavar="OUT", help="write a self-contained HTML report here instead")
    p.add_argument("--no-sources", action="store_true", help="HTML: do not embed the Python source files")
    p.add_argument("--mode", type=file_mode, default=PRIVATE_MODE, metavar="OCTAL",
                   help="HTML: the report file's mode (default 0600: it holds the process's names and sources)")
    p.add_argument("--no-findings", action="store_true",
                   help="leave out the analyzer's findings (run when the profile has none yet)")
    p.set_defaults(run=run)


def file_mode(text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an octal file mode such as 0644") from None
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"{text} is not a file mode within 0000 and 0777")
    return mode


def owner_of(pid: int) -> int | None:
    """The uid a process runs as, for the report's sources: a non-zero one of its real, effective, saved and
    fs uids where any is (a process that is root only in part is read for as its user); None if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            uids = next((line.split()[1:] for line in f if line.startswith("Uid:")), [])
    except OSError:
        return None
    return next((int(u) for u in uids if u != "0"), 0) if uids else None


def console_for(args: argparse.Namespace) -> Console:
    return view_console(args.width, args.color)


def document(args: argparse.Namespace) -> dict[str, Any]:
    if args.pid is None:
        try:
            return load(args.file)
        except DocumentError as e:
            raise CliError(str(e), 2) from None
    from deepctx.cli.client import connect
    from deepctx.cli.commands.attach import attach_request, capture  # only --pid needs the daemon's client
    from deepctx.cli.formats import json_file
    from deepctx.profiles.document import to_doc

    stub = connect(args.socket_path)
    req = attach_request(args.pid, args.duration)
    doc = to_doc(capture(stub, req, args.socket_path, show_progress=sys.stderr.isatty()))
    if args.save:
        json_file.write(doc, args.save)
    return doc


def options(args: argparse.Namespace, root: ViewNode) -> ViewOptions:
    try:
        metric = pick_metric(root, args.sort)
    except KeyError:
        raise CliError(f"--sort {args.sort}: the profile has no such metric (it has {', '.join(root.total)})",
                       2) from None
    if args.columns in (None, ""):
        columns = nonzero_metrics(root)
    elif args.columns == "all":
        columns = list(root.total)
    else:
        columns = [c.strip() for c in args.columns.split(",") if c.strip()]
        unknown = [c for c in columns if c not in root.total]
        if unknown:
            raise CliError(f"--columns: no metric named {', '.join(unknown)} (the profile has "
                           f"{', '.join(root.total)})", 2)
    flat = args.view == "flat"
    by = args.by or ("self" if flat else "total")
    min_percent = args.min_percent if args.min_percent is not None else (0.0 if flat else 0.5)
    return ViewOptions(metric=metric, by=by, columns=columns, min_percent=min_percent, max_depth=args.depth,
                       limit=FLAT_LIMIT if args.limit is None else args.limit, fold=fold_of(args),
                       folded=root.extra.get("folded", {}))


def with_findings(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with the analyzer's findings: those it carries, else a fresh analysis."""
    if "findings" not in doc:
        from deepctx.profiles.analyzer import annotate

        annotate(doc)
    return doc


def run(args: argparse.Namespace) -> int:
    owner = owner_of(args.pid) if args.pid is not None else None  # read before the capture; a saved profile: unknown
    doc = document(args)
    if not args.no_findings:
        with_findings(doc)
    if args.html:
        from deepctx.cli.formats.html import HtmlReport

        write_output(args.html, HtmlReport(embed_sources=not args.no_sources, fold=fold_of(args)).render(
            doc, owner_uid=owner), mode=args.mode)
        if args.html != "-":
            Console(stderr=True).print(f"report written to {args.html}")
        return 0
    console = console_for(args)
    if args.view == "kernel-lines":  # the PC-sampling levels, not the call tree's metrics
        from deepctx.cli.formats.kernel_lines import KernelLinesText

        try:
            KernelLinesText(lines=KERNEL_LINES if args.limit is None else args.limit).render(doc, console, args.focus)
        except re.error as e:
            raise CliError(f"--focus {args.focus!r}: not a regular expression ({e})", 2) from None
        return 0
    root = from_doc(doc, fold_of(args))
    opts = options(args, root)
    if args.view == "bottom-up":
        TreeTable("bottom-up" + (f" (callers of {args.focus})" if args.focus else "")).render(
            doc, bottom_up(root, args.focus), opts, console)
    else:
        if args.focus:
            root = focus_tree(root, args.focus)
            if not root.children:
                raise CliError(f"--focus {args.focus}: no frame matches", 1)
        if args.view == "flat":
            self_time = args.self_time or default_self_mode(root)
            FlatTable(self_time).render(doc, python_leaf_self(root) if self_time == "python" else root, opts,
                                        console)
        else:
            TreeTable("top-down" + (f" (focus {args.focus})" if args.focus else "")).render(doc, root, opts, console)
            render_compiles(doc, console)
    if not args.no_findings:
        console.print()
        FindingsText().render(doc, console, brief=True)
    return 0
