"""The profile as JSON (the CLI's machine output; schema in docs/formats.md)."""

from __future__ import annotations

import json
from typing import Any

from deepctx.cli.output import write_output


def write(doc: dict[str, Any], path: str | None) -> None:
    """The document onto stdout (path None or '-') or into path (gzipped when it ends in .gz)."""
    write_output(path, json.dumps(doc, indent=1) + "\n")
