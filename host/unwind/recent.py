"""The files whose unwind tables captures used most recently on this host, kept beside the disk cache, so that a
restarted daemon places their rows in its shared arrays as it starts (ProfilerService.prewarm_unwind_placements):
the first process of those files then takes the stand-in path (no table read) as a later process does (#30).

A record is a file as a capture met it: its identity (host/file_identity.py), its table's key (what names the
table on disk and its rows in the arrays), the path its process mapped it at (a hint where to find it again;
a container's path may name nothing on the host), its rows and when it was last used. The choice is the most
recently used first, within a count and the arrays' rows. Nothing in a record is trusted for what it places:
the prewarm opens the path, takes only a regular file whose identity is the record's, and keys its rows by
the table key computed from that file's bytes now, as a capture's get() does (TableCache.load_ahead).

Written as deepctxd's private file (host/private_files.py), at most once a SAVE_INTERVAL_S unless a new file
came (then at the end of the capture's batch that resolved it) and at the daemon's stop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from deepctx.host.record_file import RecordFile

log = logging.getLogger(__name__)

FILE_NAME = "recent.v1.json"
MAX_RECORDS = 1024  # kept in the file: beyond what a prewarm takes, for files of the recent ones gone meanwhile
MAX_FILE_BYTES = 4 << 20
SAVE_INTERVAL_S = 60.0  # last-use times alone are written at most this often


@dataclass(frozen=True)
class RecentFile:
    identity: str  # FileIdentities.of: "b:...", "h:..." ("f:" names one inode's version: never kept)
    key: str  # the table's key, "c:<hash of the CFI bytes>" (only tables with a copy on disk are kept)
    path: str  # where the capture's process mapped it
    rows: int
    used: float  # unix time of the last use


def keepable(identity: str, key: str, path: str, rows: int) -> bool:
    """Whether a use is worth a record: a table on disk (c: key) with rows, of a file found by content, at an
    absolute path of a file not deleted."""
    return (rows > 0 and key.startswith("c:") and identity[:2] in ("b:", "h:") and path.startswith("/")
            and not path.endswith(" (deleted)") and not path.startswith("/proc/"))


def choose(records: Iterable[RecentFile], limit: int, max_rows: int) -> list[RecentFile]:
    """The records a prewarm takes, most recently used first: at most `limit` files whose rows together fit in
    max_rows (a table placed under two identities, two copies of a library, counts once; one that does not
    fit is passed over for smaller ones used before it)."""
    out: list[RecentFile] = []
    keys: set[str] = set()
    rows = 0
    for r in sorted(records, key=lambda r: r.used, reverse=True):
        if len(out) >= limit:
            break
        more = 0 if r.key in keys else r.rows
        if rows + more > max_rows:
            continue
        out.append(r)
        keys.add(r.key)
        rows += more
    return out


class RecentFiles(RecordFile[str, RecentFile]):
    """The records, by identity, and their file."""

    def __init__(self, folder: Path | None, max_records: int = MAX_RECORDS,
                 save_interval_s: float = SAVE_INTERVAL_S) -> None:
        super().__init__(folder / FILE_NAME if folder is not None else None, "recently used unwind tables",
                         _parse, lambda r: r.identity, lambda r: r.used, max_records,
                         MAX_FILE_BYTES, save_interval_s)

    def note(self, identity: str, key: str, path: str | None, rows: int | None, now: float | None = None) -> None:
        """A capture used the file: its record is made or its last use moved to now. rows None: unknown here
        (a stand-in), the record's own are kept; a use without a record then makes none."""
        if path is None:
            return
        with self._lock:
            held = self._held()
            old = held.get(identity)
            n = rows if rows is not None else old.rows if old is not None and old.key == key else None
            if n is None or not keepable(identity, key, path, n):
                return
            self._put(held, RecentFile(identity, key, path, n, time.time() if now is None else now),
                      old is None or old.key != key or old.path != path)


def _parse(d: dict) -> RecentFile | None:
    r = RecentFile(identity=d.get("identity"), key=d.get("key"), path=d.get("path"), rows=d.get("rows"),
                   used=d.get("used"))
    if not (all(isinstance(v, str) for v in (r.identity, r.key, r.path)) and isinstance(r.rows, int)
            and isinstance(r.used, int | float)):
        raise ValueError(f"a record of the wrong shape: {d!r:.200}")
    return r if keepable(r.identity, r.key, r.path, r.rows) else None
