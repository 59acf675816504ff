"""Continuous mode: finds GPU processes by itself and profiles each at a low rate, in windows kept in the
window store (deepctxd --continuous)."""

from __future__ import annotations

import logging
import math
import os
import re
import threading
from typing import Any

from deepctx.daemon.capture import CaptureOptions, CaptureResult, stat_warnings
from deepctx.daemon.config import Config
from deepctx.daemon.credentials import fingerprint, real_uid
from deepctx.daemon.errors import RequestError, ResourceExhausted
from deepctx.daemon.processes import list_processes
from deepctx.daemon.profile_wire import to_message
from deepctx.daemon.store import container_of, window_for
from deepctx.daemon.store.deltas import WindowDeltas
from deepctx.daemon.store.window import owner_of
from deepctx.host.process_handle import ProcessHandle, start_time
from deepctx.host.procfs import ProcessGone
from deepctx.profiles.document import to_doc

log = logging.getLogger("deepctx.continuous")


class ContinuousProfiler:
    """A scan every `continuous_scan_s` picks up processes that load a CUDA/HIP library (and whose command
    line matches `continuous_match`, where set); each gets a
    capture of its own (one BPF program, kept until the process exits) that cuts a window every
    `continuous_window_s` into the store."""

    def __init__(self, service: Any, config: Config, shutdown: threading.Event) -> None:
        self.service = service
        self.config = config
        self.shutdown = shutdown
        self._active: dict[int, threading.Thread] = {}
        # pid -> start time of processes refused or that could not be captured: logged once each; those
        # refused by a quota are tried again at each scan (a slot may have freed), the others not
        self._refused: dict[int, tuple[int, bool]] = {}
        self._refused_lock = threading.Lock()
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
        seen = set()
        match = re.compile(self.config.continuous_match) if self.config.continuous_match else None
        for p in list_processes():
            seen.add(p.pid)
            if not p.gpu_libraries or p.pid in self._active or p.pid == me or not self._retry(p.pid):
                continue
            if match is not None and not match.search(p.command):
                continue
            t = threading.Thread(target=self._profile, args=(p.pid,), name=f"continuous-{p.pid}", daemon=True)
            self._active[p.pid] = t
            t.start()
            started.append(p.pid)
        with self._refused_lock:
            for pid in [pid for pid in self._refused if pid not in seen]:
                del self._refused[pid]
        return started

    def _retry(self, pid: int) -> bool:
        """pid is not a process refused for good (a new process under a reused pid is tried)."""
        with self._refused_lock:
            known = self._refused.get(pid)
        if known is None:
            return True
        try:
            if start_time(pid) != known[0]:
                return True
        except ProcessGone:
            return False
        return known[1]

    def _refuse(self, handle: ProcessHandle, uid: int, reason: str, retry: bool) -> None:
        """Logs a refusal once per process (one line): a scan every few seconds would repeat it."""
        with self._refused_lock:
            first = self._refused.get(handle.pid, (None,))[0] != handle.start_time
            self._refused[handle.pid] = (handle.start_time, retry)
        if first:
            log.warning("continuous capture refused", extra={"pid": handle.pid, "uid": uid, "reason": reason})

    def _profile(self, pid: int) -> None:
        try:
            handle = ProcessHandle.open(pid)
            uid = real_uid(pid)
        except ProcessGone:
            return
        why = self.service.quota_refusal(uid, continuous=True)  # before the costlier reads below
        if why:
            self._refuse(handle, uid, why, retry=True)
            handle.close()
            return
        windows = WindowOwner(pid)
        # the probes' stats count over the whole capture: each window keeps what it added (store/deltas.py)
        deltas = WindowDeltas()

        def store(result: CaptureResult, start_unix: float, end_unix: float) -> None:
            doc = to_doc(to_message(result))
            capture_stats = doc.get("stats") or {}
            doc["stats"] = deltas(capture_stats)
            # the warnings made from the capture's counters, said again from the window's share of them
            said = stat_warnings(capture_stats)
            doc["warnings"] = [w for w in doc.get("warnings") or [] if w not in said] + stat_warnings(doc["stats"])
            container, owner, warning = windows.cut()
            if warning:
                doc["warnings"].append(warning)
            self.service.store.put(window_for(doc, start_unix, end_unix, container=container, uid=owner))
            self.service.totals["continuous_windows"] += 1

        log.info("continuous capture", extra={"pid": pid})
        try:
            self.service.run_continuous(pid, self.options(), store, uid=uid, handle=handle)
        except ResourceExhausted as e:
            self._refuse(handle, uid, e.message, retry=True)
        except RequestError as e:
            self._refuse(handle, uid, e.message, retry=False)


class WindowOwner:
    """Whose each window of a process is, read at every window's cut (the last one may come after the
    process exited: then what was read at the previous cut holds). A window during which the process changed
    its credentials or its executable (an exec) is root's: it may hold samples of either side."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fingerprint = fingerprint(pid)
        self.container, self.owner = container_of(pid), owner_of(pid)

    def cut(self) -> tuple[str, int, str]:
        """The ending window's container, owner uid and warning ("" when none); starts the next window."""
        now = fingerprint(self.pid)
        owner = owner_of(self.pid) if now is not None else -1
        if now is None or owner < 0:  # gone: nothing ran after the last cut under other credentials we saw
            return self.container, self.owner, ""
        changed = self.fingerprint is None or self.fingerprint.differs(now) or owner != self.owner
        container = container_of(self.pid) or self.container
        uid, warning = self.owner, ""
        if changed:
            uid = 0
            warning = (f"process {self.pid} changed its credentials during this window (exec of a setuid "
                       "program?): the window is kept for root and the `deepctx` group only")
        self.fingerprint, self.owner, self.container = now, owner, container
        return container, uid, warning
