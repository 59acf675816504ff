"""Strings from a profiled process (command lines, thread, function and file names, warnings quoting them)
made safe for a terminal: the one place the CLI escapes them.

A target chooses its argv, thread names and code objects' names, so any of them may hold escape sequences
that would retitle, clear or reprogram the terminal of whoever reads the output (root, often). C0 and C1
controls and DEL are shown as visible escapes (ESC as \\x1b); every other character, ordinary Unicode
included, stays as it is. JSON and file exports keep the raw strings: they are data, not terminal text.

Rich interprets "[bold]" in a plain str as markup: terminal views hand target strings to rich as Text
(literal()), never as a str it would parse.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

# C0 (0x00-0x1f), DEL (0x7f) and C1 (0x80-0x9f) -> "\xNN"
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}


def printable(s: str) -> str:
    """s with every control character shown as a visible escape."""
    return s.translate(_CONTROLS)


def literal(s: str, style: str = "") -> Text:
    """s escaped, as rich Text: printed as it reads, never parsed as markup."""
    return Text(printable(s), style=style)


def printable_doc(obj: Any) -> Any:
    """A copy of a document (dicts, lists, strings, numbers) with every string, keys included, escaped: what
    the terminal views render, so none of them can print a target's raw string."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {printable(k) if isinstance(k, str) else k: printable_doc(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [printable_doc(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(printable_doc(v) for v in obj)
    return obj
