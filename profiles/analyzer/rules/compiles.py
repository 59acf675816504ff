"""What the rules about torch.compile read: the profile's `compiles` part (docs/formats.md, "Compiles")."""

from __future__ import annotations

from typing import Any

from deepctx.profiles.analyzer.index import Site
from deepctx.profiles.analyzer.names import is_library_frame
from deepctx.profiles.analyzer.registry import NotEvaluated

NO_COMPILES = NotEvaluated("the profile has no torch.compile compiles (no trace: `deepctx run` sets TORCH_TRACE; "
                           "attach to a process started with it)")


def compiles_in(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc.get("compiles") or [])


def in_capture(doc: dict[str, Any], c: dict[str, Any]) -> bool:
    """The compile began during the capture (one with no start time is taken as inside: the trace is read
    from the process's start)."""
    start = c.get("start_unix")
    begin = float(doc.get("started_unix") or 0.0)
    return not start or not begin or begin <= start <= begin + float(doc.get("duration_s") or 0.0)


def call_site(c: dict[str, Any]) -> Site:
    """Where a compile's fix goes: the user's line that called the compiled function, else its definition."""
    called = c.get("called_from")
    if called and not is_library_frame(called["file"], None):
        return Site(called["file"], called["line"], called["function"])
    return Site(c["file"] or None, c["line"] or None, c["function"])
