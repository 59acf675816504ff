"""A symbolized Python frame, as the Python family hands it to the merge."""

from __future__ import annotations

import re
from typing import NamedTuple

from deepctx.host.frames import Frame

_PACKAGES = re.compile(r"/(?:site|dist)-packages/(.+)\.py$")
_STDLIB = re.compile(r"/lib/python\d+\.\d+t?/(.+)\.py$")
_FROZEN = re.compile(r"^<frozen (.+)>$")


class PyFrameInfo(NamedTuple):
    frame: Frame  # kind "python" (or frames.TRUNCATED for the missing outer part)
    is_entry: bool  # first frame of a native _PyEval_EvalFrameDefault activation


def module_name(filename: str) -> str | None:
    """A short module name for a code file: dotted path inside site-packages or the stdlib, the
    stem elsewhere, None for code without a file (<string>, <stdin>)."""
    m = _FROZEN.match(filename)
    if m:
        return m.group(1)
    if not filename.endswith(".py"):
        return None
    m = _PACKAGES.search(filename) or _STDLIB.search(filename)
    dotted = m.group(1).replace("/", ".") if m else filename.rsplit("/", 1)[-1][:-3]
    return dotted.removesuffix(".__init__")
