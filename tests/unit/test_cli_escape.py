"""Strings from a target reach the terminal escaped (control characters visible, rich markup literal)."""

from __future__ import annotations

import io

from rich.console import Console

from deepctx.cli.escape import literal, printable, printable_doc
from deepctx.cli.formats import tree
from deepctx.cli.formats.findings import FindingsText
from deepctx.cli.formats.terminal import frame_text
from deepctx.cli.formats.top_table import renderable
from deepctx.profiles.tree import Frame

EVIL = "\x1b]0;pwned\x07\x1b[2J"
EVIL_SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J"


def rendered(*things: object) -> str:
    out = io.StringIO()
    con = Console(file=out, width=400, force_terminal=False, color_system=None, highlight=False)
    for t in things:
        con.print(t)
    return out.getvalue()


def test_controls_are_shown_as_escapes_and_unicode_is_kept() -> None:
    assert printable(EVIL) == EVIL_SHOWN
    assert printable("a\tb\nc\rd\x00e\x7ff\x9bg") == "a\\x09b\\x0ac\\x0dd\\x00e\\x7ff\\x9bg"
    assert printable("héllo wörld ✓ 日本 \u00a0") == "héllo wörld ✓ 日本 \u00a0"


def test_documents_are_escaped_keys_and_values_numbers_untouched() -> None:
    doc = {"command": EVIL, "pid": 7, "frames": [("a\x1b", 1)], "k\x1b": [None, 2.5]}
    assert printable_doc(doc) == {"command": EVIL_SHOWN, "pid": 7, "frames": [("a\\x1b", 1)], "k\\x1b": [None, 2.5]}


def test_markup_in_a_target_string_stays_literal() -> None:
    assert rendered(literal("[bold]x[/bold] [red]y")).strip() == "[bold]x[/bold] [red]y"


def test_frames_in_tree_views_are_escaped() -> None:
    f = Frame("python", "[bold]f\x1b[2J", "/tmp/\x1b]0;t\x07.py", 3)
    out = rendered(frame_text(f))
    assert "\x1b" not in out and "[bold]f\\x1b[2J" in out and "/tmp/\\x1b]0;t\\x07.py:3" in out
    assert EVIL_SHOWN in rendered(frame_text(Frame("thread", EVIL), tid=5))


def test_tree_render_escapes_the_command_and_frames() -> None:
    child = {"kind": "python", "name": "run\x1b[31m", "file": "a.py", "line": 1, "module": None, "children": [],
             "metrics": {"cpu_samples": 5}}
    doc = {"command": f"python {EVIL}", "pid": 1, "duration_s": 1.0, "metrics": ["cpu_samples"],
           "root": {"kind": "root", "name": "root", "file": None, "line": None, "module": None, "children": [child],
                    "metrics": {}}}
    out = io.StringIO()
    tree.render(doc, console=Console(file=out, width=300, color_system=None))
    text = out.getvalue()
    assert "\x1b" not in text and EVIL_SHOWN in text and "run\\x1b[31m" in text


def test_top_tables_and_findings_are_escaped() -> None:
    data = {"since_unix": 0, "until_unix": 60, "windows": 1, "sort": "cpu_samples", "kernel_sort": "gpu_time_ns",
            "processes": [{"host": "h", "pid": 3, "command": f"[bold]{EVIL}", "container": "", "windows": 1,
                           "metrics": {"cpu_samples": 1}}],
            "kernels": [{"name": "k\x1b[2J", "processes": 1, "metrics": {"calls": 1}}],
            "lines": [{"file": "f\x1b.py", "line": 2, "function": "[red]g", "metrics": {"cpu_samples": 1}}]}
    text = rendered(renderable(data))
    assert "\x1b" not in text
    assert f"[bold]{EVIL_SHOWN}" in text and "k\\x1b[2J" in text and "[red]g  f\\x1b.py:2" in text
    findings = {"findings": [{"rule": "r", "title": f"slow {EVIL}", "location": {"file": "/x/\x1b.py", "line": 1,
                                                                              "function": "f\x07"},
                              "suggestion": "fix \x1b[2J"}]}
    out = io.StringIO()
    FindingsText().render(findings, Console(file=out, width=300, color_system=None), brief=True)
    assert "\x1b" not in out.getvalue() and f"slow {EVIL_SHOWN}" in out.getvalue()
