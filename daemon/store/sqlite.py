"""WindowStore: windows on disk in SQLite, profiles zlib-compressed, bounded in size and age.

Each window keeps its summary (totals, kernels, lines: profiles/summary.py) next to the compressed
profile, so `top` reads small rows and only `query` decompresses profiles. The limits hold for the
database file itself: after a put that takes it over `max_bytes`, the oldest windows go and their pages
are given back to the file system (incremental vacuum). Every eviction is counted.

The limits hold without new windows too: `start_evicting` runs the eviction on a timer of the store's own
(the daemon's store: service_store.open_store; stopped by close), and `query` and `top` never answer with a
window past `max_age_s`, even between two evictions.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deepctx.profiles.merge import Merger
from deepctx.profiles.metrics import KERNEL_METRICS, METRICS, PROCESS_METRICS, kernel_rank_metric, rank_metric
from deepctx.profiles.summary import Summary, summarize
from deepctx.profiles.window import Window

log = logging.getLogger("deepctx.store")

SCHEMA_VERSION = 1
# Order in which `top` picks the metric to rank by when none is asked for: the first with a nonzero total.
_EVICT_TO = 0.9  # a size eviction goes down to this share of max_bytes, so the next puts do not evict again
EVICT_INTERVAL_S = 60.0  # the eviction timer's period at most (a tenth of max_age_s when that is shorter)
MIN_EVICT_INTERVAL_S = 1.0

_DDL = f"""
CREATE TABLE IF NOT EXISTS windows (
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL, pid INTEGER NOT NULL, uid INTEGER NOT NULL, command TEXT NOT NULL,
    container TEXT NOT NULL, start_unix REAL NOT NULL, end_unix REAL NOT NULL,
    {", ".join(f"{m} INTEGER NOT NULL" for m in PROCESS_METRICS)},
    size INTEGER NOT NULL,
    profile BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS windows_end ON windows(end_unix);
CREATE TABLE IF NOT EXISTS kernels (
    window_id INTEGER NOT NULL REFERENCES windows(id) ON DELETE CASCADE,
    name TEXT NOT NULL, {", ".join(f"{m} INTEGER NOT NULL" for m in KERNEL_METRICS)}
);
CREATE INDEX IF NOT EXISTS kernels_window ON kernels(window_id);
CREATE TABLE IF NOT EXISTS lines (
    window_id INTEGER NOT NULL REFERENCES windows(id) ON DELETE CASCADE,
    file TEXT NOT NULL, line INTEGER NOT NULL, function TEXT NOT NULL,
    {", ".join(f"{m} INTEGER NOT NULL" for m in METRICS)}
);
CREATE INDEX IF NOT EXISTS lines_window ON lines(window_id);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""
COUNTERS = ("windows_put", "windows_evicted_age", "windows_evicted_size", "windows_rejected_too_large")


class StoreError(RuntimeError):
    """The store's file cannot be used (unreadable, another format); the message says why."""


@dataclass(frozen=True)
class StoreLimits:
    max_bytes: int = 512 * 1024 * 1024
    max_age_s: float = 7 * 24 * 3600.0


def evict_interval_s(limits: StoreLimits) -> float:
    """The eviction timer's period: a tenth of max_age_s, between 1 s and EVICT_INTERVAL_S."""
    return min(EVICT_INTERVAL_S, max(MIN_EVICT_INTERVAL_S, limits.max_age_s / 10))


@dataclass
class StoreStats:
    windows: int
    file_bytes: int  # the database file's size, what max_bytes bounds
    oldest_unix: float | None
    newest_unix: float | None
    counters: dict[str, int]  # COUNTERS, since the store was created


@dataclass
class ProcessRow:
    host: str
    pid: int
    command: str
    container: str
    windows: int
    metrics: dict[str, int]


@dataclass
class KernelRow:
    name: str
    processes: int
    metrics: dict[str, int]


@dataclass
class LineRow:
    file: str
    line: int
    function: str
    metrics: dict[str, int]


@dataclass
class TopResult:
    since_unix: float
    until_unix: float
    windows: int
    sort: str  # the metric processes and lines are ranked by
    kernel_sort: str  # kernels carry no CPU samples: ranked by GPU time, else calls
    processes: list[ProcessRow] = field(default_factory=list)
    kernels: list[KernelRow] = field(default_factory=list)
    lines: list[LineRow] = field(default_factory=list)


@dataclass(frozen=True)
class Selection:
    """Which windows a query or top reads: those overlapping [since, until) that match every filter."""

    since: float
    until: float
    pid: int | None = None
    command: str | None = None  # a substring of the command line
    container: str | None = None  # the container id or cgroup path, or a prefix of it (short ids)
    uid: int | None = None  # only this owner's windows (callers outside root and `deepctx`)
    not_before: float | None = None  # windows that end before this are past the age limit: never read

    def where(self, alias: str = "") -> tuple[str, list[Any]]:
        p = f"{alias}." if alias else ""
        sql = [f"{p}end_unix > ?", f"{p}start_unix < ?"]
        args: list[Any] = [self.since, self.until]
        if self.not_before is not None:  # what eviction keeps: end_unix >= its cutoff
            sql.append(f"{p}end_unix >= ?")
            args.append(self.not_before)
        if self.pid is not None:
            sql.append(f"{p}pid = ?")
            args.append(self.pid)
        if self.command:
            sql.append(f"instr({p}command, ?) > 0")
            args.append(self.command)
        if self.container:
            sql.append(f"substr({p}container, 1, ?) = ?")
            args += [len(self.container), self.container]
        if self.uid is not None:
            sql.append(f"{p}uid = ?")
            args.append(self.uid)
        return " AND ".join(sql), args


Listener = Callable[[Window, Summary], None]


class WindowStore:
    def __init__(self, path: str, limits: StoreLimits | None = None, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.limits = limits or StoreLimits()
        self.clock = clock
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._db = self._open(path)
        self._stop = threading.Event()
        self._evictor: threading.Thread | None = None

    # --- opening --------------------------------------------------------------------------------

    @staticmethod
    def _open(path: str) -> sqlite3.Connection:
        folder = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            # Windows hold every profiled process's call paths: only the daemon's user reads the file.
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        except OSError as e:
            raise StoreError(f"cannot open the window store {path}: {e.strerror or e}") from None
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
            if tables and version != SCHEMA_VERSION:
                raise StoreError(f"{path} is a window store of another version ({version}, this deepctxd "
                                 f"reads {SCHEMA_VERSION}): move it away or set store_path")
            if not tables:
                db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table: freed pages can go back
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA synchronous = NORMAL")
            db.executescript(_DDL)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.executemany("INSERT OR IGNORE INTO counters VALUES (?, 0)", [(c,) for c in COUNTERS])
        except sqlite3.DatabaseError as e:
            db.close()
            raise StoreError(f"{path} is not a usable window store: {e}") from None
        return db

    def close(self) -> None:
        """Stops the eviction timer (waits for an eviction under way), then closes the file."""
        self._stop.set()
        evictor = self._evictor
        if evictor is not None and evictor is not threading.current_thread():
            evictor.join()
        with self._lock:
            self._db.close()

    def add_listener(self, fn: Listener) -> None:
        """fn(window, summary) runs after each stored put (metrics, fleet exporters); it must not block."""
        self._listeners.append(fn)

    # --- writing --------------------------------------------------------------------------------

    def put(self, window: Window) -> int | None:
        """Stores a window; returns its id, or None when it alone is larger than a quarter of max_bytes
        (counted as windows_rejected_too_large). Evicts by age, then by size."""
        summary = summarize(window.profile)
        blob = zlib.compress(json.dumps(window.profile, separators=(",", ":")).encode(), 6)
        size = len(blob) + 64 * (len(summary.kernels) + len(summary.lines) + 1)
        with self._lock:
            if size > self.limits.max_bytes // 4:
                self._count("windows_rejected_too_large", 1)
                log.warning("window too large for the store", extra={"pid": window.pid, "bytes": size})
                return None
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                values = [window.host, window.pid, window.uid, window.command, window.container,
                          window.start_unix, window.end_unix,
                          *(summary.totals[m] for m in METRICS), summary.launches, summary.copy_bytes, size, blob]
                cur = db.execute(f"INSERT INTO windows VALUES (NULL, {', '.join('?' * len(values))})", values)
                wid = int(cur.lastrowid or 0)
                db.executemany(f"INSERT INTO kernels VALUES (?, ?, {', '.join('?' * len(KERNEL_METRICS))})",
                               [(wid, name, *(m[k] for k in KERNEL_METRICS)) for name, m in summary.kernels.items()])
                db.executemany(f"INSERT INTO lines VALUES (?, ?, ?, ?, {', '.join('?' * len(METRICS))})",
                               [(wid, f, ln, fn, *(m[k] for k in METRICS))
                                for (f, ln, fn), m in summary.lines.items()])
                self._count("windows_put", 1)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._evict()
        for fn in self._listeners:
            try:
                fn(window, summary)
            except Exception:
                log.exception("window listener failed")
        return wid

    def _count(self, name: str, n: int) -> None:
        if n:
            self._db.execute("UPDATE counters SET value = value + ? WHERE name = ?", (n, name))

    def _file_bytes(self) -> int:
        """The database file's size, after giving free pages back (what max_bytes bounds)."""
        db = self._db
        if db.execute("PRAGMA freelist_count").fetchone()[0]:
            db.execute("PRAGMA incremental_vacuum").fetchall()
        return int(db.execute("PRAGMA page_count").fetchone()[0]) * int(db.execute("PRAGMA page_size").fetchone()[0])

    def _evict(self) -> None:
        """Under the lock: windows past max_age_s go, then the oldest until the file is under max_bytes."""
        db = self._db
        cutoff = self._cutoff()
        n = db.execute("DELETE FROM windows WHERE end_unix < ?", (cutoff,)).rowcount
        self._count("windows_evicted_age", n)
        evicted = 0
        for _ in range(64):  # each round frees at least the estimated excess; bounded all the same
            excess = self._file_bytes() - self.limits.max_bytes
            if excess <= 0:
                break
            need = excess + self.limits.max_bytes * (1 - _EVICT_TO)
            ids: list[int] = []
            freed = 0
            for wid, size in db.execute("SELECT id, size FROM windows ORDER BY end_unix, id"):
                ids.append(wid)
                freed += size
                if freed >= need:
                    break
            if not ids:
                break
            db.executemany("DELETE FROM windows WHERE id = ?", [(i,) for i in ids])
            evicted += len(ids)
        self._count("windows_evicted_size", evicted)
        self._file_bytes()  # the pages of what went back to the file system

    def _cutoff(self) -> float:
        """Windows that end before this are past max_age_s."""
        return self.clock() - self.limits.max_age_s

    def evict(self) -> None:
        """Applies the age and size limits now (the eviction timer's step; puts evict on their own)."""
        with self._lock:
            if self._stop.is_set():  # closing: the file may be gone already
                return
            self._evict()

    def start_evicting(self, interval_s: float | None = None) -> None:
        """Evicts now, then every interval_s (evict_interval_s by default) in a thread of the store's own,
        so windows past the age limit go (and are counted) when no new window comes; close() stops it.
        The thread sleeps on an event between evictions: no busy loop, and close() wakes it at once."""
        if self._evictor is not None:
            return
        self.evict()
        period = evict_interval_s(self.limits) if interval_s is None else interval_s
        self._evictor = threading.Thread(target=self._evict_loop, args=(period,), name="store-evict", daemon=True)
        self._evictor.start()

    def _evict_loop(self, period: float) -> None:
        while not self._stop.wait(period):
            try:
                self.evict()
            except Exception:  # a failed round (disk error ...) is logged; the next one tries again
                log.exception("window store eviction failed")

    # --- reading --------------------------------------------------------------------------------

    def stats(self) -> StoreStats:
        with self._lock:
            db = self._db
            n, oldest, newest = db.execute("SELECT count(*), min(start_unix), max(end_unix) FROM windows").fetchone()
            counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
            return StoreStats(int(n), self._file_bytes(), oldest, newest, counters)

    def query(self, since: float, until: float | None = None, pid: int | None = None, command: str | None = None,
              container: str | None = None, uid: int | None = None) -> dict[str, Any] | None:
        """The merged profile of the matching windows (docs/fleet.md), or None when none match."""
        sel = Selection(since, self.clock() if until is None else until, pid, command, container, uid,
                        not_before=self._cutoff())
        where, args = sel.where()
        with self._lock:
            rows = self._db.execute(f"SELECT id, start_unix, end_unix FROM windows WHERE {where} ORDER BY start_unix, id",
                                    args).fetchall()
        merger = Merger()
        start, end = float("inf"), float("-inf")
        for wid, w_start, w_end in rows:
            with self._lock:
                row = self._db.execute("SELECT profile FROM windows WHERE id = ?", (wid,)).fetchone()
            if row is None:  # evicted since the listing
                continue
            merger.add(json.loads(zlib.decompress(row[0])))
            start, end = min(start, w_start), max(end, w_end)
        return merger.result(start, end) if merger.count else None

    def top(self, since: float, n: int = 10, until: float | None = None, uid: int | None = None,
            sort: str | None = None) -> TopResult:
        """The busiest processes, kernels and lines over [since, until)."""
        sel = Selection(since, self.clock() if until is None else until, uid=uid, not_before=self._cutoff())
        where, args = sel.where()
        w_where, w_args = sel.where("w")
        sums = ", ".join(f"sum({m})" for m in PROCESS_METRICS)
        with self._lock:
            db = self._db
            totals = db.execute(f"SELECT count(*), {sums} FROM windows WHERE {where}", args).fetchone()
            count = int(totals[0])
            by_metric = {m: int(v or 0) for m, v in zip(PROCESS_METRICS, totals[1:], strict=True)}
            metric = rank_metric(by_metric, sort)
            kernel_metric = kernel_rank_metric(by_metric, sort)
            result = TopResult(sel.since, sel.until, count, metric, kernel_metric)
            for row in db.execute(f"SELECT host, pid, command, container, count(*), {sums} FROM windows WHERE {where} "
                                  f"GROUP BY host, pid, command, container ORDER BY sum({metric}) DESC, pid "
                                  f"LIMIT ?", [*args, n]):
                result.processes.append(ProcessRow(row[0], row[1], row[2], row[3], row[4],
                                                   dict(zip(PROCESS_METRICS, row[5:], strict=True))))
            ksums = ", ".join(f"sum(k.{m})" for m in KERNEL_METRICS)
            for row in db.execute(f"SELECT k.name, count(DISTINCT w.pid), {ksums} FROM kernels k JOIN windows w "
                                  f"ON k.window_id = w.id WHERE {w_where} GROUP BY k.name "
                                  f"ORDER BY sum(k.{kernel_metric}) DESC, k.name LIMIT ?", [*w_args, n]):
                result.kernels.append(KernelRow(row[0], row[1], dict(zip(KERNEL_METRICS, row[2:], strict=True))))
            lsums = ", ".join(f"sum(l.{m})" for m in METRICS)
            for row in db.execute(f"SELECT l.file, l.line, l.function, {lsums} FROM lines l JOIN windows w "
                                  f"ON l.window_id = w.id WHERE {w_where} GROUP BY l.file, l.line, l.function "
                                  f"ORDER BY sum(l.{metric}) DESC, l.file, l.line LIMIT ?", [*w_args, n]):
                result.lines.append(LineRow(row[0], row[1], row[2], dict(zip(METRICS, row[3:], strict=True))))
        return result
