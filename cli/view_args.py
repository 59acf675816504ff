"""Options every command that shows a tree shares (report, diff, attach, run, profile, fleet profile):
what to fold, and the console the views print on."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rich.console import Console

from deepctx.profiles.fold import Fold

# Output that is not a terminal (a pipe, a file) is not cut to any width: each row whole on its line, for
# grep and less -S; only --width (or COLUMNS) narrows it.
PIPE_WIDTH = 1000


def add_fold_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--show-startup", action="store_true",
                   help="keep the interpreter's start-up frames above each thread's outermost Python frame "
                        "(_start, __libc_start_main, Py_RunMain ...; default: folded, so stacks whose native "
                        "unwinding stopped short merge with the others)")
    p.add_argument("--show-plumbing", action="store_true",
                   help="keep framework plumbing frames (Module._wrapped_call_impl, Module._call_impl and the "
                        "others listed in docs/views.md; default: folded into their callers)")
    p.add_argument("--show-dispatch", action="store_true",
                   help="keep the native frames around PyTorch operators (the Python binding, the dispatcher, "
                        "autograd and kernel wrappers; default: folded, so a path reads line -> aten::mm -> "
                        "cudaLaunchKernel -> kernel)")


def fold_of(args: argparse.Namespace) -> Fold:
    return Fold(startup=not args.show_startup, plumbing=not args.show_plumbing, dispatch=not args.show_dispatch)


def view_console(width: int | None = None, color: str = "auto", file: Any = None) -> Console:
    """A console for the views: --width, else the terminal's, else PIPE_WIDTH; colour as --color says."""
    force = {"always": True, "never": False}.get(color)
    kw: dict[str, Any] = {}
    if width:
        kw["width"] = width
    elif not (file or sys.stdout).isatty() and not os.environ.get("COLUMNS"):
        kw["width"] = PIPE_WIDTH
    if force is False:
        kw["no_color"] = True
        kw["color_system"] = None
    return Console(force_terminal=force, highlight=False, soft_wrap=False, file=file, **kw)
