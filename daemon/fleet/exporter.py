"""Sends every stored window to the fleet sinks (ClickHouse, Pyroscope) from one background thread.

The store's put never waits on the network: windows queue up (at most fleet_queue_windows; more are
dropped and counted), and each is tried a few times before it counts as failed."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from deepctx.daemon.fleet.pyroscope import push
from deepctx.profiles.fleet.clickhouse import ClickHouse
from deepctx.profiles.summary import Summary
from deepctx.profiles.window import Window

log = logging.getLogger("deepctx.fleet")

ATTEMPTS = 3
RETRY_DELAYS_S = (1.0, 5.0)


@dataclass
class Sink:
    name: str
    send: Callable[[Window], None]
    prepare: Callable[[], None] | None = None  # e.g. create the table; retried until it succeeds once
    prepared: bool = False


@dataclass
class ExportCounters:
    exported: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    dropped_queue_full: int = 0

    def as_dict(self) -> dict[str, int]:
        out = {f"fleet_{k}_exported": v for k, v in self.exported.items()}
        out.update({f"fleet_{k}_failed": v for k, v in self.failed.items()})
        out["fleet_dropped_queue_full"] = self.dropped_queue_full
        return out


class FleetExporter:
    def __init__(self, sinks: list[Sink], max_queue: int = 1000) -> None:
        self.sinks = sinks
        self.counters = ExportCounters({s.name: 0 for s in sinks}, {s.name: 0 for s in sinks})
        self._queue: queue.Queue[Window | None] = queue.Queue(maxsize=max_queue)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-export", daemon=True)
        self._idle = threading.Condition()
        self._busy = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout_s)

    def on_window(self, window: Window, _summary: Summary) -> None:
        """The store's listener: queue the window, never block."""
        with self._idle:  # held while queueing: the worker cannot count the window done before it counts
            try:
                self._queue.put_nowait(window)
            except queue.Full:
                self.counters.dropped_queue_full += 1
                return
            self._busy += 1

    def wait_idle(self, timeout_s: float) -> bool:
        """True once every queued window has been sent or counted as failed (tests, shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout_s)

    def _run(self) -> None:
        while True:
            window = self._queue.get()
            if window is None:
                return
            for sink in self.sinks:
                self._send(sink, window)
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def _send(self, sink: Sink, window: Window) -> None:
        last: Exception | None = None
        for attempt in range(ATTEMPTS):
            try:
                if sink.prepare is not None and not sink.prepared:
                    sink.prepare()
                    sink.prepared = True
                sink.send(window)
                self.counters.exported[sink.name] += 1
                return
            except Exception as e:
                last = e
                sink.prepared = False  # the server may have lost the table too: prepare again
            if attempt < len(RETRY_DELAYS_S) and self._stop.wait(RETRY_DELAYS_S[attempt]):
                break
        self.counters.failed[sink.name] += 1
        log.warning("window export failed", extra={"sink": sink.name, "pid": window.pid, "error": str(last)})


def sinks_from(clickhouse_url: str, clickhouse_database: str, pyroscope_url: str, pyroscope_app: str) -> list[Sink]:
    sinks: list[Sink] = []
    if clickhouse_url:
        ch = ClickHouse(clickhouse_url, clickhouse_database)
        sinks.append(Sink("clickhouse", ch.insert_window, ch.create_schema))
    if pyroscope_url:
        sinks.append(Sink("pyroscope", lambda w: push(pyroscope_url, pyroscope_app, w)))
    return sinks
