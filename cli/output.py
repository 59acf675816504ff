"""The one place the CLI writes what a command made (a profile, an export, a report) to `-o PATH`."""

from __future__ import annotations

import gzip
import os
import stat
import sys

GZIP_MAGIC = b"\x1f\x8b"
# what is written holds a process's call paths, names and (HTML) sources: its reader's alone unless asked
PRIVATE_MODE = 0o600


def write_output(path: str | None, data: str | bytes, mode: int = PRIVATE_MODE) -> None:
    """data into PATH, or onto stdout when PATH is None or '-'. A PATH ending in .gz gets gzip's format
    (data already gzipped, as pprof is, is written as it is); text is written as UTF-8. A regular file of
    ours ends with mode (0600 unless asked otherwise), whether new or overwritten."""
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
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    with open(fd, "wb") as f:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            os.fchmod(fd, mode)  # an existing file keeps its old mode through O_CREAT: set it
        f.write(raw)
