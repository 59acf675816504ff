"""Integration tier: a real deepctxd on a private socket, real targets, real eBPF (root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@dataclass
class Daemon:
    proc: subprocess.Popen
    socket: str
    log: Path

    def env(self) -> dict[str, str]:
        return dict(os.environ, DEEPCTX_SOCKET=self.socket)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "deepctx"), *args], env=self.env(), capture_output=True, text=True,
                              timeout=timeout)

    def attach_json(self, pid: int, *args: str) -> dict:
        r = self.cli("attach", str(pid), "--format", "json", "--quiet", *args)
        assert r.returncode == 0, f"attach failed ({r.returncode}): {r.stderr}"
        return json.loads(r.stdout)

    def alive(self) -> bool:
        """The daemon still answers requests."""
        return self.proc.poll() is None and self.cli("status", "--format", "json").returncode == 0


def start_daemon(tmp: Path, *extra: str) -> Daemon:
    sock = str(tmp / "deepctxd.sock")
    log = tmp / "deepctxd.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "deepctxd"), "--foreground", "--socket", sock, "--log-format", "json",
                                 *extra], stdout=out, stderr=subprocess.STDOUT)
    d = Daemon(proc, sock, log)
    r = d.cli("status", "--wait", "60")
    assert r.returncode == 0, f"deepctxd did not come up: {r.stderr}\n{log.read_text()}"
    return d


def stop_daemon(d: Daemon) -> int:
    if d.proc.poll() is None:
        d.proc.send_signal(signal.SIGTERM)
    return d.proc.wait(timeout=60)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("daemon"))
    yield d
    rc = stop_daemon(d)
    assert rc == 0, f"deepctxd exited with {rc} on SIGTERM:\n{d.log.read_text()[-4000:]}"


class Target:
    """A target process that prints "ready <pid>" once it is in its steady state."""

    def __init__(self, argv: list[str], **kw: object) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("ready"), f"target {argv} did not start: {line!r}"
        self.pid = int(line.split()[1])
        self.line = line

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for(cond, timeout: float = 30.0, what: str = "condition"):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)  # polling an external process's state, with a deadline
    raise AssertionError(f"timed out waiting for {what}")
