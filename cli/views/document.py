"""Reading profile documents (deepctx.profile/v1 JSON, optionally gzip- or xz-compressed) from files."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path
from typing import Any

from deepctx.profiles.document import SCHEMA


class DocumentError(ValueError):
    """The file is not a readable deepctx profile; the message says why, in one line."""


def load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise DocumentError(f"cannot read {p}: {e.strerror or e}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise DocumentError(f"{p}: not a valid gzip file ({e})") from None
    elif raw[:6] == b"\xfd7zXZ\x00":
        try:
            raw = lzma.decompress(raw)
        except lzma.LZMAError as e:
            raise DocumentError(f"{p}: not a valid xz file ({e})") from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise DocumentError(f"{p}: not JSON ({e})") from None
    return check(doc, str(p))


def check(doc: Any, where: str = "profile") -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise DocumentError(f"{where}: not a deepctx profile (schema {found!r}, expected {SCHEMA!r})")
    if not isinstance(doc.get("root"), dict) or not isinstance(doc.get("metrics"), list):
        raise DocumentError(f"{where}: the profile has no tree (a 'root' node and 'metrics' are required)")
    return doc
