"""The one place the CLI writes what a command made (a profile, an export, a report) to `-o PATH`."""

from __future__ import annotations

import gzip
import sys

GZIP_MAGIC = b"\x1f\x8b"


def write_output(path: str | None, data: str | bytes) -> None:
    """data into PATH, or onto stdout when PATH is None or '-'. A PATH ending in .gz gets gzip's format
    (data already gzipped, as pprof is, is written as it is); text is written as UTF-8."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if path in (None, "-"):
        if isinstance(data, str):
            sys.stdout.write(data)
            sys.stdout.flush()
        else:
            sys.stdout.flush()
            sys.stdout.buffer.write(raw)
            sys.stdout.buffer.flush()
        return
    assert path is not None
    if path.endswith(".gz") and not raw.startswith(GZIP_MAGIC):
        raw = gzip.compress(raw, mtime=0)
    with open(path, "wb") as f:
        f.write(raw)
