"""deepctxd's stop waits for the running captures to send their profiles before the gRPC server's own grace
cuts their streams (CI: a capture ending on SIGTERM on a loaded machine took longer than the grace, and its
client got "deepctxd is not running" instead of its profile)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from deepctx.daemon import service as service_mod
from deepctx.daemon.capture import CaptureOptions
from deepctx.daemon.config import Config
from deepctx.daemon.service import ProfilerService


class SlowCapture:
    """Stands in for Capture: run() returns only when released (a profile still being built)."""

    release = threading.Event()

    def __init__(self, session_id: int, pid: int, *_: Any, **kw: Any) -> None:
        self.id, self.pid, self.uid, self.continuous = session_id, pid, kw.get("uid", 0), True

    def run(self, _report: Any, _cancelled: Any) -> Any:
        SlowCapture.release.wait(30)
        raise RuntimeError("ended")  # run_continuous logs it as a failed capture and ends the session


def test_wait_idle_returns_when_the_last_capture_has_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_mod, "Capture", SlowCapture)
    svc = ProfilerService(Config(cache_dir=str(tmp_path), store_path=""), threading.Event())
    assert svc.wait_idle(0)  # nothing runs
    opts = CaptureOptions.from_config(svc.config, duration_s=60.0, sample_hz=99)
    worker = threading.Thread(target=svc.run_continuous, args=(4242, opts, lambda *a: None), kwargs={"uid": 0})
    worker.start()
    try:
        assert not svc.wait_idle(0.3)  # the capture still runs: not idle
    finally:
        SlowCapture.release.set()
    assert svc.wait_idle(10)  # woken by the session's end, not by the timeout
    worker.join(10)
    assert svc.totals["captures_failed"] == 1


def test_stop_waits_for_captures_before_the_servers_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    from deepctx.daemon import server as server_mod

    order: list[str] = []

    class Service:
        programs = type("P", (), {"close": lambda self: order.append("programs closed")})()

        def wait_idle(self, timeout_s: float) -> bool:
            order.append(f"wait_idle {timeout_s:g}")
            return True

        def close(self) -> None:  # the last uses of unwind tables to disk
            order.append("service closed")

    class Grpc:
        def stop(self, grace: float) -> Any:
            order.append(f"server stop {grace:g}")
            return type("Stopped", (), {"wait": lambda self: True})()

    srv = server_mod.DaemonServer.__new__(server_mod.DaemonServer)
    srv.shutdown, srv.continuous, srv.service, srv._server = threading.Event(), None, Service(), Grpc()
    srv.health = type("H", (), {"enter_graceful_shutdown": lambda self: None})()
    srv.parts = type("Parts", (), {"stop_accepting": lambda self: order.append("stop accepting"),
                                   "stop": lambda self: None})()
    srv.config = Config(socket="/nonexistent/deepctxd.sock")
    monkeypatch.setattr(server_mod, "wait_released", lambda _s: True)
    srv.stop()
    assert order == ["stop accepting", f"wait_idle {server_mod.SHUTDOWN_CAPTURES_S:g}", "server stop 5",
                     "programs closed", "service closed"]
