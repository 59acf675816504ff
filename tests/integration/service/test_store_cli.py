"""`deepctx top` and `deepctx profile` against a daemon whose store holds windows of recorded H200 runs."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time

import store_producer as sp
from harness import DEEPCTX

N = 5


def test_top_and_profile_answer_from_the_store(service_dir, stopped) -> None:
    start = time.time() - 1800
    service_dir.put(sp.windows(start, N))
    d = service_dir.start()
    stopped.append(d)
    r = d.cli("top", "--once", "--format", "json", "--since", "1h")
    assert r.returncode == 0, r.stderr
    top = json.loads(r.stdout)
    assert top["windows"] == 3 * N and top["sort"] == "cpu_samples"
    assert [p["pid"] for p in top["processes"]] == [2267, 1498, 604]
    torch = top["processes"][2]
    assert (torch["metrics"]["launches"], torch["container"]) == (N * 1091, sp.CONTAINERS["h200_torch_ops"])
    assert top["kernels"][0]["metrics"]["calls"] == N * 1000
    for name in sp.NAMES:
        fx = sp.fixture(name)
        r = d.cli("profile", "--pid", str(fx["pid"]), "--since", "1h", "--format", "json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["stats"]["windows"] == N and doc["ended"] == "windows"
        assert sp.totals(doc) == {k: N * v for k, v in sp.totals(fx).items()}
    out = service_dir.path / "torch.json"
    r = d.cli("profile", "--container", sp.CONTAINERS["h200_torch_ops"][:12], "--since", "1h", "-o", str(out))
    assert r.returncode == 0 and json.loads(out.read_text())["pid"] == 604
    r = d.cli("profile", "--command", "no-such-command", "--since", "1h")
    assert r.returncode == 1 and "no stored windows match" in r.stderr
    r = subprocess.run([*DEEPCTX, "top", "--once", "--since", "1h"], env=dict(d.env(), COLUMNS="400"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "deepctx_add_kernel" in r.stdout and "jax_jit.py" in r.stdout
    r = d.cli("top", "--once", "--since", "forever")
    assert r.returncode == 2 and "not a time span" in r.stderr


def read_until_exit(proc: subprocess.Popen, master: int, within_s: float) -> bytes:
    """What the process writes to the pty until it exits (its side closes) or within_s passes."""
    out = b""
    deadline = time.monotonic() + within_s
    while proc.poll() is None and time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                out += os.read(master, 65536)
            except OSError:  # the slave side closed as the process exited
                break
    return out


def test_live_top_refreshes_until_interrupted(service_dir, stopped) -> None:
    service_dir.put(sp.windows(time.time() - 600, 1, names=("h200_triton_kernel",)))
    d = service_dir.start()
    stopped.append(d)
    master, slave = pty.openpty()
    proc = subprocess.Popen([*DEEPCTX, "top", "--interval", "0.2", "--since", "1h"], stdout=slave, stderr=slave,
                            env=dict(d.env(), COLUMNS="200", LINES="50", PYTHONFAULTHANDLER="1"))
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        # each refresh redraws the header, which names the time of the query
        while seen.count(b"deepctx top") < 3 and time.monotonic() < deadline:
            if select.select([master], [], [], 1.0)[0]:
                seen += os.read(master, 65536)
        assert seen.count(b"deepctx top") >= 3, seen[-2000:]
        assert b"triton_kernel.py" in seen
        proc.send_signal(signal.SIGINT)
        # read on while it exits: a full pty (nobody reading) would block top's redraw in write()
        tail = read_until_exit(proc, master, 30)
        try:
            status = proc.wait(timeout=5)  # its pty side closes a moment before it is gone
        except subprocess.TimeoutExpired:  # still running: its threads' stacks (PYTHONFAULTHANDLER) say where
            proc.send_signal(signal.SIGABRT)
            tail += read_until_exit(proc, master, 10)
            raise AssertionError(f"top still ran 35 s after SIGINT:\n{tail[-6000:].decode(errors='replace')}") from None
        assert status == 0, tail[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
