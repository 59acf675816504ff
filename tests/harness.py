"""Driving a real deepctxd and real target processes from tests (integration and GPU tiers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def command(name: str, module: str) -> list[str]:
    """The installed console script, or the module run by this interpreter (GPU host: no install)."""
    script = BIN / name
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


DEEPCTX = command("deepctx", "deepctx.cli.main")
DEEPCTXD = command("deepctxd", "deepctx.daemon.main")


@dataclass
class Daemon:
    proc: subprocess.Popen
    socket: str
    log: Path

    def env(self) -> dict[str, str]:
        return dict(os.environ, DEEPCTX_SOCKET=self.socket)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*DEEPCTX, *args], env=self.env(), capture_output=True, text=True,
                              timeout=timeout)

    def attach_json(self, pid: int, *args: str) -> dict:
        r = self.cli("attach", str(pid), "--format", "json", "--quiet", *args)
        assert r.returncode == 0, f"attach failed ({r.returncode}): {r.stderr}\n{self.log_tail()}"
        return json.loads(r.stdout)

    def log_tail(self, lines: int = 40) -> str:
        """The daemon log's last lines (a failed capture's traceback is there), for a failing assertion."""
        try:
            return "deepctxd's log, last lines:\n" + "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError as e:
            return f"deepctxd's log unreadable: {e}"

    def alive(self) -> bool:
        """The daemon still answers requests."""
        return self.proc.poll() is None and self.cli("status", "--format", "json").returncode == 0


STARTED: list[Daemon] = []  # every daemon start_daemon started in this test process, for reap_daemons


def reap_daemons(since: int) -> list[Daemon]:
    """Stops the daemons started after STARTED[since] that still run (a test that failed before its
    stop_daemon), so that none outlives its test: a daemon left behind keeps probing, keeps the compiler's
    pages mapped and takes CPU from every later test. Returns those it had to stop."""
    left = [d for d in STARTED[since:] if d.proc.poll() is None]
    for d in left:
        d.proc.send_signal(signal.SIGTERM)
    for d in left:
        try:
            d.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            d.proc.kill()
            d.proc.wait()
    del STARTED[since:]
    return left


def start_daemon(tmp: Path, *extra: str, env: dict[str, str] | None = None) -> Daemon:
    """extra: deepctxd's arguments; env: added to its environment."""
    sock = str(tmp / "deepctxd.sock")
    log = tmp / "deepctxd.log"
    with open(log, "w") as out:
        # no programs compiled ahead unless a test asks (--prewarm): on a shared 2-CPU machine the compiles
        # of every test daemon's start would slow the captures they test
        prewarm = [] if any(a.startswith("--prewarm") or a.startswith("--no-prewarm") for a in extra) else ["--no-prewarm"]
        proc = subprocess.Popen([*DEEPCTXD, "--foreground", "--socket", sock, "--log-format", "json",
                                 *prewarm, *extra], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **env} if env else None)
    d = Daemon(proc, sock, log)
    STARTED.append(d)
    r = d.cli("status", "--wait", "60")
    assert r.returncode == 0, f"deepctxd did not come up: {r.stderr}\n{log.read_text()}"
    return d


def stop_daemon(d: Daemon) -> int:
    """SIGTERM, then its exit status. One still running a minute later is killed (a continuous daemon left
    behind profiles the GPU targets of every later test) and the test fails."""
    if d.proc.poll() is None:
        d.proc.send_signal(signal.SIGTERM)
    try:
        return d.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        d.proc.kill()
        d.proc.wait()
        raise AssertionError(f"deepctxd did not stop within 60 s of SIGTERM:\n{d.log.read_text()[-3000:]}") from None


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


class StdinTarget:
    """A target that prints "ready <pid>", then waits for a line on stdin before each phase of work."""

    def __init__(self, argv: list[str], **kw: object) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     **kw)  # type: ignore[call-overload]
        self.first = self.expect("ready")  # "ready <pid> ...": some targets say more
        self.pid = int(self.first.split()[1])

    def expect(self, word: str) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith(word), f"expected {word!r} from the target, got {line!r}"
        return line

    def go(self) -> None:
        self.send("go")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def session_of(daemon: Daemon, pid: int) -> dict | None:
    r = daemon.cli("status", "--format", "json")
    assert r.returncode == 0, r.stderr
    for s in json.loads(r.stdout).get("sessions") or []:
        if s["pid"] == pid:
            return s
    return None


def stop_run(daemon: Daemon, run: StdinTarget, pid: int | None = None, timeout: float = 30.0) -> None:
    """Ends a `deepctx run` capture while its target lives (so its frames are named): `deepctx stop`, the
    session gone, then the target's stdin closed, so that it exits and `deepctx run` (run) writes the profile
    and returns 0. pid: the target's, when it is not run.pid."""
    pid = run.pid if pid is None else pid
    stop = daemon.cli("stop", str(pid))
    assert stop.returncode == 0, stop.stderr
    wait_for(lambda: session_of(daemon, pid) is None, timeout=timeout, what="the capture to end")
    assert run.proc.stdin is not None
    run.proc.stdin.close()
    assert run.proc.wait(timeout=120) == 0


def capture_started(pool: Any, daemon: Daemon, target: StdinTarget, *attach_args: str) -> Any:
    """`deepctx attach` (exact mode, up to 300 s, unless attach_args say otherwise) submitted to pool, once its
    capture runs: the future of its profile."""
    fut = pool.submit(daemon.attach_json, target.pid, "--duration", "300", "--mode", "exact", *attach_args)
    wait_for(lambda: (session_of(daemon, target.pid) or {}).get("state") == "capturing", what="capture running",
             timeout=120)
    return fut


def profile_phase(daemon: Daemon, target: StdinTarget, *attach_args: str) -> dict:
    """Attaches, waits until the probes are live, lets the target do its work, ends the capture with
    `deepctx stop` while the target still lives (so everything is named), and returns the profile. In exact
    mode (the tests assert every call's path) unless attach_args name another."""
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(1) as pool:
        fut = capture_started(pool, daemon, target, *attach_args)
        target.go()
        target.expect("done")
        r = daemon.cli("stop", str(target.pid))
        assert r.returncode == 0, r.stderr
        doc = fut.result()
        target.stop()
    assert doc["ended"] == "stopped", doc["ended"]
    return doc


def profile_in_own_daemon(home: Path, argv: list[str], config: str = "") -> dict:
    """profile_phase of a StdinTarget (argv) under a daemon of its own in home, with config (TOML) if given."""
    if config:
        (home / "deepctxd.toml").write_text(config)
    d = start_daemon(home, *(["--config", str(home / "deepctxd.toml")] if config else []))
    try:
        t = StdinTarget(argv)
        try:
            return profile_phase(d, t)
        finally:
            t.stop()
    finally:
        assert stop_daemon(d) == 0


def marked_lines(path: Path, marker: str) -> set[int]:
    """Line numbers of the lines of a source file that end in the comment `# MARKER` (at least one)."""
    found = {i for i, line in enumerate(path.read_text().splitlines(), 1) if line.endswith(f"# {marker}")}
    assert found, f"no line ends in '# {marker}' in {path}"
    return found


def line_of(path: Path, marker: str) -> int:
    """The line number of the one line of a source file that ends in the comment `# MARKER`."""
    found = marked_lines(path, marker)
    assert len(found) == 1, f"'# {marker}' ends lines {sorted(found)} of {path}, not one"
    return found.pop()


def cuda_runtime() -> str:
    """The real CUDA runtime library of pip's nvidia-cuda-runtime (the probes fire on it without a GPU)."""
    import nvidia
    import pytest

    for base in nvidia.__path__:
        for lib in sorted(Path(base).glob("cu*/lib/libcudart.so.*")):
            return str(lib)
    pytest.skip("pip package nvidia-cuda-runtime is not installed")
