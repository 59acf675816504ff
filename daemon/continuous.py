"""Continuous mode: finds GPU processes by itself and profiles each at a low rate, in windows kept in the
window store (deepctxd --continuous)."""

from __future__ import annotations

import logging
import math
import os
import threading
from typing import Any

from deepctx.daemon.capture import CaptureOptions, CaptureResult, stat_warnings
from deepctx.daemon.config import Config
from deepctx.daemon.processes import list_processes
from deepctx.daemon.profile_doc import to_doc
from deepctx.daemon.profile_wire import to_message
from deepctx.daemon.store import container_of, window_for
from deepctx.daemon.store.deltas import WindowDeltas
from deepctx.daemon.store.window import owner_of

log = logging.getLogger("deepctx.continuous")


class ContinuousProfiler:
    """A scan every `continuous_scan_s` picks up processes that load a CUDA/HIP library; each gets a
    capture of its own (one BPF program, kept until the process exits) that cuts a window every
    `continuous_window_s` into the store."""

    def __init__(self, service: Any, config: Config, shutdown: threading.Event) -> None:
        self.service = service
        self.config = config
        self.shutdown = shutdown
        self._active: dict[int, threading.Thread] = {}
        self._thread: threading.Thread | None = None

    def options(self) -> CaptureOptions:
        cfg = self.config
        return CaptureOptions.from_config(cfg, duration_s=math.inf, sample_hz=cfg.continuous_sample_hz,
                                          gpu_mode=cfg.continuous_gpu_mode,
                                          window_s=cfg.continuous_window_s, gpu_duty=cfg.continuous_gpu_duty)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="continuous", daemon=True)
        self._thread.start()
        log.info("continuous mode", extra={"window_s": self.config.continuous_window_s,
                                           "sample_hz": self.config.continuous_sample_hz})

    def stop(self, timeout_s: float = 30.0) -> None:
        """The daemon's shutdown event ends every capture (each stores its last window)."""
        for t in list(self._active.values()):
            t.join(timeout_s)

    def _loop(self) -> None:
        while not self.shutdown.is_set():
            try:
                self.scan()
            except Exception:
                log.exception("scan failed")
            self.shutdown.wait(self.config.continuous_scan_s)

    def scan(self) -> list[int]:
        """Starts a capture for every new GPU process; returns their pids."""
        for pid, t in list(self._active.items()):
            if not t.is_alive():
                del self._active[pid]
        started = []
        me = os.getpid()
        for p in list_processes():
            if not p.gpu_libraries or p.pid in self._active or p.pid == me:
                continue
            t = threading.Thread(target=self._profile, args=(p.pid,), name=f"continuous-{p.pid}", daemon=True)
            self._active[p.pid] = t
            t.start()
            started.append(p.pid)
        return started

    def _profile(self, pid: int) -> None:
        # who owns the process and where it runs, read now: its last window comes after it exited
        container, uid = container_of(pid), owner_of(pid)
        # the probes' stats count over the whole capture: each window keeps what it added (store/deltas.py)
        deltas = WindowDeltas()

        def store(result: CaptureResult, start_unix: float, end_unix: float) -> None:
            doc = to_doc(to_message(result))
            capture_stats = doc.get("stats") or {}
            doc["stats"] = deltas(capture_stats)
            # the warnings made from the capture's counters, said again from the window's share of them
            said = stat_warnings(capture_stats)
            doc["warnings"] = [w for w in doc.get("warnings") or [] if w not in said] + stat_warnings(doc["stats"])
            self.service.store.put(window_for(doc, start_unix, end_unix, container=container, uid=uid))
            self.service.totals["continuous_windows"] += 1

        log.info("continuous capture", extra={"pid": pid})
        self.service.run_continuous(pid, self.options(), store)
