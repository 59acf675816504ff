"""A private file of recently used records (host/recent_uses.py, host/unwind/recent.py): read at the first use,
kept in use order, least recently used out beyond max_records, written at most once a save_interval_s unless a
new record came (save), as deepctxd's private file (host/private_files.py). Safe from several threads."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import asdict
from pathlib import Path
from typing import Generic, TypeVar

from deepctx.host.private_files import open_private, replace_private

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


class RecordFile(Generic[K, R]):
    """what: the records' name in warnings; parse: one record of the file's JSON list to a record, None when it
    is not to be kept (ValueError when malformed); key: a record's key; used: its last use (the read keeps the
    max_records most recent)."""

    def __init__(self, path: Path | None, what: str, parse: Callable[[dict], R | None], key: Callable[[R], K],
                 used: Callable[[R], float], max_records: int, max_bytes: int, save_interval_s: float) -> None:
        self.path = path
        self.max_records = max_records
        self.save_interval_s = save_interval_s
        self._what, self._parse, self._key, self._used, self._max_bytes = what, parse, key, used, max_bytes
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # one write at a time (a capture's and the stop's)
        self._records: dict[K, R] | None = None  # read from the file at the first use
        self._new = False  # a record not there before: written at the next save()
        self._dirty = False
        self._saved = time.monotonic()

    def records(self) -> list[R]:
        with self._lock:
            return list(self._held().values())

    def _put(self, held: dict[K, R], record: R, new: bool) -> None:
        """Under the lock: record moved to the end (the dict's order is the use order), the oldest out."""
        key = self._key(record)
        held.pop(key, None)
        held[key] = record
        self._new = self._new or new
        self._dirty = True
        while len(held) > self.max_records:
            del held[next(iter(held))]

    def save(self, force: bool = False) -> bool:
        """Writes the records when a new one came, when the last write is save_interval_s old, or (force) when
        anything changed. Returns whether it wrote; a write that fails is logged and tried again later."""
        if self.path is None:
            return False
        with self._lock:
            due = self._new or (self._dirty and (force or time.monotonic() - self._saved >= self.save_interval_s))
            if not due:
                return False
            data = json.dumps([asdict(r) for r in self._held().values()],  # type: ignore[call-overload]
                              separators=(",", ":")).encode()
            self._new = self._dirty = False
            self._saved = time.monotonic()
        with self._save_lock:
            try:
                replace_private(self.path, lambda f: f.write(data))
            except OSError as e:
                log.warning("cannot keep the %s in %s: %s", self._what, self.path, e)
                with self._lock:
                    self._dirty = True
                return False
        return True

    def _held(self) -> dict[K, R]:
        """Under the lock: the records, read from the file at the first use."""
        if self._records is None:
            self._records = self._read()
        return self._records

    def _records_of(self, raw: bytes) -> list[R]:
        doc = json.loads(raw)
        if not isinstance(doc, list):
            raise ValueError("not a list")
        out = []
        for d in doc:
            if not isinstance(d, dict):
                raise ValueError("a record is not an object")
            r = self._parse(d)
            if r is not None:
                out.append(r)
        return out

    def _read(self) -> dict[K, R]:
        """The file's records in the order of their use (an unreadable file: none, with a warning)."""
        if self.path is None:
            return {}
        try:
            with open_private(self.path) as f:
                raw = f.read(self._max_bytes + 1)
            if len(raw) > self._max_bytes:
                raise ValueError(f"over {self._max_bytes} bytes")
            got = self._records_of(raw)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("ignoring the %s in %s: %s", self._what, self.path, e)
            return {}
        return {self._key(r): r for r in sorted(got, key=self._used)[-self.max_records:]}

