"""Continuous mode under attack by an unprivileged user (issue #29, findings 4 and 7): processes that map a
file named libcuda.so.1 (any small library under that name) are taken only up to the user's quota and do
not lock root out; each refusal is logged once, in one line; a window during which the process exec'd a
setuid program is root's, not the user's."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import sqlite3
import subprocess
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Daemon, StdinTarget, Target, session_of, stop_daemon, wait_for
from profile_paths import walk
from service_env import ServiceDir
from users import as_user, cli_as

REFUSED = "continuous capture refused"


@pytest.fixture
def libdir(native_targets: Path) -> Iterator[Path]:
    """A root-owned folder every user may enter, with a small library named libcuda.so.1 and a setuid-root
    copy of tests/targets/bin/setuid_spin."""
    folder = Path(tempfile.mkdtemp(prefix="deepctx-fakecuda-", dir="/tmp"))
    try:
        os.chmod(folder, 0o755)
        shutil.copy(native_targets / "libknown.so", folder / "libcuda.so.1")
        os.chmod(folder / "libcuda.so.1", 0o755)
        shutil.copy(native_targets / "setuid_spin", folder / "setuid_spin")
        (folder / "sleep").symlink_to(shutil.which("sleep") or "/bin/sleep")
        os.chmod(folder / "setuid_spin", 0o4755)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def gpu_sleeper(u: pwd.struct_passwd, libdir: Path) -> subprocess.Popen:
    """A process of u that maps libcuda.so.1 (LD_PRELOAD) and sleeps."""
    # run by a link in libdir: the command line names the folder the test's continuous_match looks for
    p = subprocess.Popen([*as_user(u), str(libdir / "sleep"), "600"], env={"LD_PRELOAD": str(libdir / "libcuda.so.1")})
    wait_for(lambda: "libcuda.so.1" in Path(f"/proc/{p.pid}/maps").read_text(), timeout=30, what="libcuda mapped")
    return p


def log_lines(d: Daemon) -> list[dict]:
    return [json.loads(line) for line in d.log.read_text().splitlines() if line.startswith("{")]


def refusals(d: Daemon, pid: int) -> list[dict]:
    return [e for e in log_lines(d) if e.get("msg") == REFUSED and e.get("pid") == pid]


def windows(store: Path, pid: int) -> list[tuple[int, dict]]:
    """(owner uid, profile) of every stored window of pid."""
    if not store.exists():
        return []
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10) as db:
        rows = db.execute("SELECT uid, profile FROM windows WHERE pid = ? ORDER BY start_unix", (pid,)).fetchall()
    return [(uid, json.loads(zlib.decompress(blob))) for uid, blob in rows]


def capturing(d: Daemon, pid: int) -> bool:
    return (session_of(d, pid) or {}).get("state") == "capturing"


def test_quota_one_refusal_line_and_window_owners(service_dir: ServiceDir, user: pwd.struct_passwd,
                                                  other_user: pwd.struct_passwd, libdir: Path) -> None:
    d = service_dir.start("--continuous", continuous_window_s=1.0, continuous_scan_s=0.2, max_sessions_per_user=2,
                          continuous_match=re.escape(str(libdir)))
    procs: list[subprocess.Popen] = []
    spin = None
    try:
        # the other user's process maps the library, then execs a setuid-root program mid-capture
        spin = StdinTarget([*as_user(other_user), "/bin/sh", "-c",
                            f"echo ready $$; read x; exec {libdir / 'setuid_spin'} 60"],
                           env={"LD_PRELOAD": str(libdir / "libcuda.so.1")})
        procs = [gpu_sleeper(user, libdir) for _ in range(4)]
        pids = [p.pid for p in procs]
        wait_for(lambda: sum(capturing(d, p) for p in pids) == 2 and sum(bool(refusals(d, p)) for p in pids) == 2,
                 timeout=120, what="two of the user's processes captured, two refused")
        taken = [p for p in pids if capturing(d, p)]
        left = [p for p in pids if p not in taken]
        # many scans later (a window a second, a scan every 0.2 s), still one line per refused process
        wait_for(lambda: all(len(windows(service_dir.store, p)) >= 3 for p in taken), timeout=120,
                 what="three windows of each captured process")
        for p in left:
            lines = refusals(d, p)
            assert len(lines) == 1, lines
            assert "max_sessions_per_user" in lines[0]["reason"] and lines[0]["uid"] == user.pw_uid
            assert not capturing(d, p)
        for p in taken:
            assert {uid for uid, _ in windows(service_dir.store, p)} == {user.pw_uid}
        # the setuid exec: the window it happened in, and those after it, are root's
        wait_for(lambda: capturing(d, spin.pid) and windows(service_dir.store, spin.pid), timeout=120,
                 what="a window of the other user's process")
        assert {uid for uid, _ in windows(service_dir.store, spin.pid)} == {other_user.pw_uid}
        spin.go()
        spin.expect("spinning 0")
        wait_for(lambda: [uid for uid, _ in windows(service_dir.store, spin.pid)][-2:] == [0, 0], timeout=60,
                 what="root-owned windows after the exec")
        stored = windows(service_dir.store, spin.pid)
        changed = [doc for uid, doc in stored if any("changed its credentials during this window" in w
                                                     for w in doc.get("warnings") or [])]
        assert len(changed) == 1
        assert stored[[doc for _, doc in stored].index(changed[0])][0] == 0
        for uid, doc in stored:  # the setuid program's frames only ever in root's windows
            if "setuid_spin_loop" in {n["name"] for _, n in walk(doc)}:
                assert uid == 0
        assert any("setuid_spin_loop" in {n["name"] for _, n in walk(doc)} for _, doc in stored)
        r = cli_as(other_user, d, "profile", "--pid", str(spin.pid), "--since", "1h", "--format", "json")
        assert r.returncode == 0, r.stderr
        assert "setuid_spin_loop" not in {n["name"] for _, n in walk(json.loads(r.stdout))}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        if spin is not None:
            spin.stop()
        rc = stop_daemon(d)
    log = d.log.read_text()
    assert rc == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_root_is_served_when_continuous_captures_fill_max_sessions(service_dir: ServiceDir, user: pwd.struct_passwd,
                                                                   libdir: Path, native_targets: Path) -> None:
    d = service_dir.start("--continuous", continuous_window_s=1.0, continuous_scan_s=0.2, max_sessions=1,
                          continuous_match=re.escape(str(libdir)))
    p = gpu_sleeper(user, libdir)
    try:
        # the user's process fills max_sessions
        wait_for(lambda: any(s["state"] == "capturing" for s in json.loads(d.cli("status", "--format", "json").stdout)
                             .get("sessions") or []), timeout=120, what="a continuous capture running")
        burner = str(native_targets / "cpu_burner")
        with Target([burner, "30"]) as roots, Target([*as_user(user), burner, "30"]) as own:
            doc = d.attach_json(roots.pid, "--duration", "1")  # one capture beyond max_sessions
            assert doc["pid"] == roots.pid and doc["stats"]["cpu_samples"] > 0
            r = cli_as(user, d, "attach", str(own.pid), "--duration", "1", "--quiet")
            assert r.returncode == 1 and "setting max_sessions" in r.stderr, r.stderr
    finally:
        p.kill()
        p.wait()
        rc = stop_daemon(d)
    assert rc == 0, d.log.read_text()[-3000:]
