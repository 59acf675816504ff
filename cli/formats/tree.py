"""The top-down tree that `attach`, `run` and `profile` print: the same table as `deepctx report`'s
top-down view (cli/formats/tree_table.py), for the metric asked for or the profile's first measured."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from deepctx.cli.formats.compiles import render_compiles
from deepctx.cli.formats.terminal import ViewOptions
from deepctx.cli.formats.tree_table import TreeTable
from deepctx.profiles.fold import VIEWS_DEFAULT, Fold
from deepctx.profiles.tree import from_doc, nonzero_metrics, pick_metric


def render(doc: dict[str, Any], metric: str | None = None, min_percent: float = 0.5, max_depth: int = 64,
           console: Console | None = None, fold: Fold = VIEWS_DEFAULT) -> None:
    root = from_doc(doc, fold)
    opts = ViewOptions(metric=pick_metric(root, metric if metric in root.total else None),
                       columns=nonzero_metrics(root), min_percent=min_percent, max_depth=max_depth, fold=fold,
                       folded=root.extra.get("folded", {}))
    console = console or Console(highlight=False, soft_wrap=False)
    TreeTable("top-down").render(doc, root, opts, console)
    render_compiles(doc, console)
