"""Prometheus metrics: per-process GPU work from windows and finished captures, and the daemon's own
health (CPU, memory, targets, lost events, store, connections). Served on `metrics_address` (off by
default; docs/metrics.md lists every series)."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from deepctx.daemon.store.sqlite import StoreStats
from deepctx.daemon.store.window import container_of
from deepctx.profiles.lost import lost_counters
from deepctx.profiles.metrics import METRICS
from deepctx.profiles.summary import Summary
from deepctx.profiles.window import Window
from deepctx.proto.v1 import deepctx_pb2 as pb

MAX_PROCESSES = 512  # per-process series kept; the least recently seen go first (counted)
MAX_LABEL_CHARS = 200
LABELS = ("pid", "command", "container")
# C0, DEL and C1 controls: a label is printed by whatever reads /metrics
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}


def command_label(command: str, full: bool = False) -> str:
    """The command label: the executable's name (argv[0]'s last part), not the command line, whose
    arguments may hold tokens that anyone who reaches /metrics would read; the whole line with full
    (setting metrics_command_lines). Controls escaped either way."""
    first = command.split(" ", 1)[0]
    text = command if full or first.startswith("[") else os.path.basename(first)
    return text[:MAX_LABEL_CHARS].translate(_CONTROLS)


@dataclass
class ProcessEntry:
    gpu_time_ns: int = 0
    launches: int = 0
    sync_wait_ns: int = 0
    copy_bytes: int = 0
    cpu_samples: int = 0
    api_time_ns: int = 0
    profiled_s: float = 0.0
    launches_per_s: float = 0.0  # in the latest window or capture
    updated: float = field(default_factory=time.time)


class ProcessTotals:
    """Counters per (pid, command label, container), added to by every window and finished capture."""

    def __init__(self, max_processes: int = MAX_PROCESSES, full_command: bool = False) -> None:
        self.max_processes = max_processes
        self.full_command = full_command  # label with whole command lines (metrics_command_lines)
        self.dropped = 0
        self.lost: dict[str, int] = {}  # the observed profiles' lost / dropped counters, summed
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str, str], ProcessEntry] = OrderedDict()

    def observe(self, pid: int, command: str, container: str, summary: Summary, duration_s: float) -> None:
        key = (str(pid), command_label(command, self.full_command), container[:MAX_LABEL_CHARS])
        t = summary.totals
        with self._lock:
            e = self._entries.pop(key, None) or ProcessEntry()
            self._entries[key] = e  # most recently seen last
            e.gpu_time_ns += t.get("gpu_time_ns", 0)
            e.sync_wait_ns += t.get("sync_wait_ns", 0)
            e.cpu_samples += t.get("cpu_samples", 0)
            e.api_time_ns += t.get("api_time_ns", 0)
            e.launches += summary.launches
            e.copy_bytes += summary.copy_bytes
            e.profiled_s += max(0.0, duration_s)
            e.launches_per_s = summary.launches / duration_s if duration_s > 0 else 0.0
            e.updated = time.time()
            for k, v in summary.lost.items():
                self.lost[k] = self.lost.get(k, 0) + v
            while len(self._entries) > self.max_processes:
                self._entries.popitem(last=False)
                self.dropped += 1

    def snapshot(self) -> list[tuple[tuple[str, str, str], ProcessEntry]]:
        with self._lock:
            return [(k, ProcessEntry(**vars(e))) for k, e in self._entries.items()]


def summary_of_message(msg: pb.Profile) -> Summary:
    """Totals, launches, copy bytes and lost counters of a Profile message (no lines, no kernels)."""
    s = Summary()
    names = list(msg.metrics)
    for node in msg.nodes:
        values = dict(zip(names, node.metrics, strict=False))
        for m in METRICS:
            s.totals[m] += int(values.get(m, 0))
        if node.kind == "kernel":
            s.launches += int(values.get("calls", 0))
        elif node.kind == "memcpy":
            s.copy_bytes += int(values.get("bytes", 0))
    s.lost = lost_counters(msg.stats, zeros=True)
    return s


def observe_capture(processes: ProcessTotals, msg: pb.Profile) -> None:
    """Adds a finished attach capture (container read now: the process may be gone, then it is "")."""
    processes.observe(msg.pid, msg.command, container_of(msg.pid), summary_of_message(msg), msg.duration_s)


def window_listener(processes: ProcessTotals) -> Callable[[Window, Summary], None]:
    """The store listener that adds every stored window."""
    def on_window(w: Window, summary: Summary) -> None:
        processes.observe(w.pid, w.command, w.container, summary, w.end_unix - w.start_unix)

    return on_window


@dataclass
class DaemonSnapshot:
    attached_targets: int = 0
    totals: dict[str, int] = field(default_factory=dict)  # the service's totals (captures, requests ...)
    store: StoreStats | None = None
    connections: int = 0
    counters: dict[str, int] = field(default_factory=dict)  # relay, exporters: name -> count


class DeepctxCollector(Collector):
    def __init__(self, processes: ProcessTotals, daemon: Callable[[], DaemonSnapshot]) -> None:
        self.processes = processes
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        yield from self._process_metrics()
        yield from self._daemon_metrics(self.daemon())

    def _process_metrics(self) -> Iterator[Metric]:
        specs: list[tuple[str, str, Any, Callable[[ProcessEntry], float]]] = [
            ("deepctx_process_gpu_time_seconds", "Device time of kernels and copies", CounterMetricFamily,
             lambda e: e.gpu_time_ns / 1e9),
            ("deepctx_process_gpu_launches", "GPU kernel launches", CounterMetricFamily, lambda e: e.launches),
            ("deepctx_process_gpu_launches_per_second", "Kernel launches per second in the latest window or capture",
             GaugeMetricFamily, lambda e: e.launches_per_s),
            ("deepctx_process_sync_wait_seconds", "Time spent waiting for the device", CounterMetricFamily,
             lambda e: e.sync_wait_ns / 1e9),
            ("deepctx_process_copy_bytes", "Bytes copied between host and device", CounterMetricFamily,
             lambda e: e.copy_bytes),
            ("deepctx_process_gpu_api_seconds", "Time inside GPU API calls", CounterMetricFamily,
             lambda e: e.api_time_ns / 1e9),
            ("deepctx_process_cpu_samples", "CPU samples taken", CounterMetricFamily, lambda e: e.cpu_samples),
            ("deepctx_process_profiled_seconds", "Time the process was profiled", CounterMetricFamily,
             lambda e: e.profiled_s),
        ]
        entries = self.processes.snapshot()
        for name, doc, kind, value in specs:
            fam = kind(name, doc, labels=LABELS)
            for key, e in entries:
                fam.add_metric(list(key), value(e))
            yield fam

    def _daemon_metrics(self, d: DaemonSnapshot) -> Iterator[Metric]:
        yield GaugeMetricFamily("deepctx_attached_targets", "Captures running now", value=d.attached_targets)
        yield GaugeMetricFamily("deepctx_connections", "Client connections open now", value=d.connections)
        lost = CounterMetricFamily("deepctx_lost_events", "Events lost or dropped, by the profile counter that "
                                   "counts them", labels=("counter",))
        for k, v in sorted(self.processes.lost.items()):
            lost.add_metric([k], v)
        yield lost
        totals = CounterMetricFamily("deepctx_daemon_events", "The daemon's totals since start (captures, "
                                     "requests, samples)", labels=("event",))
        for k, v in sorted(d.totals.items()):
            totals.add_metric([k], v)
        for k, v in sorted(d.counters.items()):
            totals.add_metric([k], v)
        totals.add_metric(["metrics_processes_dropped"], self.processes.dropped)
        yield totals
        if d.store is not None:
            yield GaugeMetricFamily("deepctx_store_windows", "Windows in the store", value=d.store.windows)
            yield GaugeMetricFamily("deepctx_store_bytes", "Bytes the store's file uses", value=d.store.file_bytes)
            ev = CounterMetricFamily("deepctx_store_windows_removed", "Windows evicted or refused by the store",
                                     labels=("reason",))
            for reason, key in (("age", "windows_evicted_age"), ("size", "windows_evicted_size"),
                                ("too_large", "windows_rejected_too_large")):
                ev.add_metric([reason], d.store.counters.get(key, 0))
            yield ev
            yield CounterMetricFamily("deepctx_store_windows_put", "Windows stored",
                                      value=d.store.counters.get("windows_put", 0))


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class MetricsServer:
    """The /metrics HTTP listener (prometheus_client's), with the process collector for the daemon's own
    CPU time, memory and open files."""

    def __init__(self, address: str, processes: ProcessTotals, daemon: Callable[[], DaemonSnapshot]) -> None:
        self.address = address
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.registry.register(DeepctxCollector(processes, daemon))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        host, port = parse_address(self.address)
        self._server, self._thread = start_http_server(port, host, registry=self.registry)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1]) if self._server is not None else 0

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
