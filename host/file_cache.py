"""The daemon's one cache of data derived from files (unwind tables, symbol tables, interpreter layouts),
keyed by file identity (host/file_identity.py) and kind, shared by every capture and process.

Entries are evicted least recently used first so that the bytes held stay within a budget (the daemon's
`host_cache_bytes`); each entry's size is what its value really takes (numpy arrays' nbytes and the like,
measured by the caller's `size` function when it is stored). A value larger than the whole budget is
handed back but not kept. An evicted value that a capture still holds is found again through a weak
reference rather than built a second time (not counted in the bytes held: the capture holds it).

`stats()` gives the counters that `deepctx status` reports.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from deepctx.host import file_cache_status
from deepctx.host.file_identity import FileIdentities

if TYPE_CHECKING:
    from deepctx.host.recent_uses import RecentUses

T = TypeVar("T")

DEFAULT_BUDGET_BYTES = 64 << 20
DEFAULT_MAX_ENTRIES = 512
Key = tuple[str, str]  # (file identity, kind)


@dataclass
class _Entry:
    value: Any
    nbytes: int


class FileCache:
    """Values per (file identity, kind), least recently used out under `budget_bytes` (and `max_entries`).
    Thread-safe; a value being built is waited for, not built twice."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES, max_entries: int = DEFAULT_MAX_ENTRIES,
                 identities: FileIdentities | None = None) -> None:
        self.budget_bytes = budget_bytes
        self.max_entries = max_entries
        self.identities = identities if identities is not None else FileIdentities()
        self._lock = threading.Lock()
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._bytes = 0
        self._evicted: weakref.WeakValueDictionary[Key, Any] = weakref.WeakValueDictionary()
        self._building: dict[Key, threading.Event] = {}
        self.counters = {"hits": 0, "misses": 0, "builds": 0, "revived": 0, "evictions": 0,
                         "evicted_bytes": 0, "not_kept": 0}
        self.builds_by_kind: dict[str, int] = {}
        # the daemon's record of the files captures asked symbols of (host/recent_uses.py): its next start
        # builds them ahead; None (tests, tools): nothing recorded
        self.uses: RecentUses | None = None

    def note_use(self, kind: str, file_id: str, path: str | None) -> None:
        """A capture asked for `kind` of the file mapped at path (identity file_id): recorded for the next
        daemon's prewarm, and written when a new file came (else at most once a minute)."""
        uses = self.uses
        if uses is not None:
            uses.note(kind, file_id, path)
            uses.save()

    def identify(self, path: str) -> str:
        """The identity of the file at path (OSError when it cannot be opened)."""
        return self.identities.of(path)

    def get(self, file_id: str, kind: str, build: Callable[[], T], size: Callable[[T], int]) -> T:
        """The cached value, or `build()`'s (stored at `size(value)` bytes). An exception from build
        propagates and stores nothing."""
        key = (file_id, kind)
        while True:
            with self._lock:
                found = self._lookup(key)
                if found is not None:
                    return found[0]
                waiting = self._building.get(key)
                if waiting is None:
                    mine = self._building[key] = threading.Event()
                    self.counters["misses"] += 1
                    break
            waiting.wait()  # then look again: a build that raised left nothing
        try:
            value = build()
            with self._lock:
                self.counters["builds"] += 1
                self.builds_by_kind[kind] = self.builds_by_kind.get(kind, 0) + 1
            self.put(file_id, kind, value, size(value))
            return value
        finally:
            with self._lock:
                del self._building[key]
            mine.set()

    def peek(self, file_id: str, kind: str) -> Any | None:
        """The cached value, or None; builds nothing (a hit counts as a use)."""
        with self._lock:
            found = self._lookup((file_id, kind))
        return found[0] if found is not None else None

    def holds(self, file_id: str, kind: str) -> bool:
        """Whether a value is at hand (held, or evicted but still alive); counts nothing, moves nothing."""
        with self._lock:
            return (file_id, kind) in self._entries or (file_id, kind) in self._evicted

    def put(self, file_id: str, kind: str, value: Any, nbytes: int) -> None:
        """Stores value as the most recently used, then evicts the least recently used entries until the
        bytes held are within the budget."""
        key = (file_id, kind)
        with self._lock:
            self._remove(key)
            if nbytes > self.budget_bytes:
                self.counters["not_kept"] += 1
                self._keep_weakly(key, value)
                return
            self._entries[key] = _Entry(value, nbytes)
            self._bytes += nbytes
            self._evict()

    def discard(self, file_id: str, kind: str) -> None:
        with self._lock:
            self._remove((file_id, kind))
            self._evicted.pop((file_id, kind), None)

    def set_budget(self, budget_bytes: int, max_entries: int | None = None) -> None:
        with self._lock:
            self.budget_bytes = budget_bytes
            if max_entries is not None:
                self.max_entries = max_entries
            self._evict()

    def stats(self) -> dict[str, int]:
        """Counters and sizes: entries, bytes and budget_bytes now; hits, misses, builds, revived (found
        through a capture's reference after eviction), evictions, evicted_bytes and not_kept (values over
        the whole budget) since the start; builds per kind; the identity memo's reads."""
        with self._lock:
            out = {"entries": len(self._entries), "bytes": self._bytes, "budget_bytes": self.budget_bytes,
                   "max_entries": self.max_entries, **self.counters}
            out.update({f"builds_{k}": v for k, v in sorted(self.builds_by_kind.items())})
            for kind in sorted({k for _, k in self._entries}):
                out[f"bytes_{kind}"] = sum(e.nbytes for (_, k), e in self._entries.items() if k == kind)
        out.update(self.identities.counters)
        return out

    @property
    def bytes(self) -> int:
        return self._bytes

    def keys(self) -> list[Key]:
        """Held entries, least recently used first."""
        with self._lock:
            return list(self._entries)

    # --- under the lock --------------------------------------------------------------------------

    def _lookup(self, key: Key) -> tuple[Any] | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self.counters["hits"] += 1
            return (entry.value,)
        value = self._evicted.get(key)
        if value is None:
            return None
        self.counters["revived"] += 1
        return (value,)

    def _remove(self, key: Key) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.nbytes

    def _evict(self) -> None:
        while self._entries and (self._bytes > self.budget_bytes or len(self._entries) > self.max_entries):
            key, entry = self._entries.popitem(last=False)
            self._bytes -= entry.nbytes
            self.counters["evictions"] += 1
            self.counters["evicted_bytes"] += entry.nbytes
            self._keep_weakly(key, entry.value)

    def _keep_weakly(self, key: Key, value: Any) -> None:
        try:
            self._evicted[key] = value
        except TypeError:  # a value that takes no weak reference (a tuple): gone with its last holder
            pass


_shared = FileCache()


def shared() -> FileCache:
    """The daemon's cache: every capture and process uses this one."""
    return _shared


def configure(budget_bytes: int, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
    """Sets the shared cache's budget (the daemon's `host_cache_bytes` and `symbol_cache_files`), evicting
    down to it."""
    _shared.set_budget(budget_bytes, max_entries)


# the daemon's Status totals carry stats() under this prefix (host_cache_hits ...; deepctx status)
STATUS_PREFIX = file_cache_status.STATUS_PREFIX


def stats() -> dict[str, int]:
    """The shared cache's counters (FileCache.stats), for `deepctx status`."""
    return _shared.stats()
