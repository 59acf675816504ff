"""The files whose symbol tables (and interpreter layouts) captures asked for most recently on this host, kept
beside the disk cache, so that a restarted daemon builds them into its per-file cache as it starts
(ProfilerService.prewarm_symbols): its first process then finds them in memory, as a later process does (#30).
The sibling of host/unwind/recent.py, for what has no disk cache of its own.

A record is a (kind, identity, name) as a capture met it: the per-file cache's kind ("symbols", "python"), the
file's identity (host/file_identity.py), the name the process mapped it by (part of the "python" key), the
path it was mapped at (a hint where to find it again) and its last use. Nothing in a record is trusted: the
prewarm opens the path, takes only a regular file whose identity computed now is the record's, and builds
from that descriptor. Only files a capture asked for are recorded, so a prewarm holds what captures hold.

Written as deepctxd's private file (host/private_files.py): when a new file came (at most once a
SAVE_INTERVAL_S otherwise) and at the daemon's stop.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deepctx.host.record_file import RecordFile

log = logging.getLogger(__name__)

FILE_NAME = "recent_uses.v1.json"
MAX_RECORDS = 512
MAX_FILE_BYTES = 2 << 20
SAVE_INTERVAL_S = 60.0


@dataclass(frozen=True)
class RecentUse:
    kind: str  # the per-file cache's kind
    identity: str  # FileIdentities.of: "b:...", "h:..." ("f:" names one inode's version: never kept)
    name: str  # the basename the process mapped it by
    path: str  # where the capture's process mapped it
    used: float  # unix time of the last use

    @property
    def key(self) -> tuple[str, str, str]:
        return self.kind, self.identity, self.name


def keepable(kind: str, identity: str, path: str) -> bool:
    """Whether a use is worth a record: a file found by content at an absolute path of a file not deleted."""
    return (bool(kind) and identity[:2] in ("b:", "h:") and path.startswith("/")
            and not path.endswith(" (deleted)") and not path.startswith("/proc/"))


def choose(records: Iterable[RecentUse], limit: int, kinds: Iterable[str]) -> list[RecentUse]:
    """The records a prewarm takes, most recently used first: at most `limit`, of the given kinds, one per
    (kind, identity, name)."""
    wanted = set(kinds)
    out: list[RecentUse] = []
    seen: set[tuple[str, str, str]] = set()
    for r in sorted(records, key=lambda r: r.used, reverse=True):
        if len(out) >= limit:
            break
        if r.kind in wanted and r.key not in seen:
            seen.add(r.key)
            out.append(r)
    return out


@contextmanager
def opened(rec: RecentUse, identify: Callable[[str], str]) -> Iterator[str | None]:
    """A path to the recorded file (/proc/self/fd/N of a descriptor held meanwhile: a rename cannot swap it),
    or None: gone from its path, no regular file, or another file now (its identity computed now is not the
    record's)."""
    try:
        fd = os.open(rec.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        yield None
        return
    try:
        st = os.fstat(fd)
        path: str | None = f"/proc/self/fd/{fd}"
        if not stat.S_ISREG(st.st_mode):  # a FIFO or a device put there would block or never end
            path = None
        elif rec.identity.startswith("b:") and rec.identity.split(":")[2] != str(st.st_size):
            path = None  # another size: another identity, known without reading the file
        elif identify(f"/proc/self/fd/{fd}") != rec.identity:
            path = None
        yield path
    finally:
        os.close(fd)


class RecentUses(RecordFile[tuple[str, str, str], RecentUse]):
    """The records, by (kind, identity, name), and their file."""

    def __init__(self, folder: Path | None, max_records: int = MAX_RECORDS,
                 save_interval_s: float = SAVE_INTERVAL_S) -> None:
        super().__init__(folder / FILE_NAME if folder is not None else None, "recently used symbol tables", _parse,
                         lambda r: r.key, lambda r: r.used, max_records, MAX_FILE_BYTES, save_interval_s)

    def note(self, kind: str, identity: str, path: str | None, now: float | None = None) -> None:
        """A capture asked for the file's `kind`: its record is made or its last use moved to now."""
        if path is None or not keepable(kind, identity, path):
            return
        name = path.rsplit("/", 1)[-1]
        with self._lock:
            held = self._held()
            old = held.get((kind, identity, name))
            self._put(held, RecentUse(kind, identity, name, path, time.time() if now is None else now),
                      old is None or old.path != path)


def _parse(d: dict) -> RecentUse | None:
    r = RecentUse(kind=d.get("kind"), identity=d.get("identity"), name=d.get("name"), path=d.get("path"),
                  used=d.get("used"))
    if not (all(isinstance(v, str) for v in (r.kind, r.identity, r.name, r.path))
            and isinstance(r.used, int | float)):
        raise ValueError(f"a record of the wrong shape: {d!r:.200}")
    return r if keepable(r.kind, r.identity, r.path) and r.name == r.path.rsplit("/", 1)[-1] else None
