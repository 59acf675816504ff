"""The profile as JSON (the CLI's machine output; schema in docs/formats.md)."""

from __future__ import annotations

import json
import sys
from typing import Any


def write(doc: dict[str, Any], path: str | None) -> None:
    text = json.dumps(doc, indent=1)
    if path in (None, "-"):
        sys.stdout.write(text + "\n")
        return
    assert path is not None
    with open(path, "w") as f:
        f.write(text + "\n")
