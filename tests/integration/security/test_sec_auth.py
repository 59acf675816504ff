"""Authorization follows the kernel (issue #29, findings 3, 4, 5 and 13): an unprivileged user attacks a real
deepctxd through its public socket. Each process below could be read under the old hand-made rule (the
leader's uids, the owner of /proc/PID); the kernel, asked as the user, refuses every one of them."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import DEEPCTX, Daemon, StdinTarget, Target, session_of, stop_daemon, wait_for
from profile_paths import walk
from service_env import ServiceDir
from users import as_user, cli_as

PY = "/usr/bin/python3"  # not a per-user shim: the users made for the tests run it


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    svc = ServiceDir()
    d = svc.start(store_path="")
    try:
        yield d
    finally:
        rc = stop_daemon(d)
        log = d.log.read_text()
        svc.remove()
        assert rc == 0, log[-3000:]
        assert "Traceback" not in log, log[-3000:]


def status(pid: int, field: str, tid: int | None = None) -> list[str]:
    path = f"/proc/{pid}/task/{tid}/status" if tid else f"/proc/{pid}/status"
    for line in Path(path).read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split()[1:]
    raise AssertionError(f"no {field} in {path}")


def attach(user: pwd.struct_passwd, d: Daemon, pid: int, *args: str) -> subprocess.CompletedProcess:
    return cli_as(user, d, "attach", str(pid), "--duration", "1", "--format", "json", "--quiet", *args)


def refused(r: subprocess.CompletedProcess, reason: str) -> None:
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert reason in r.stderr, r.stderr
    assert r.stdout == ""  # no profile, not even an empty one


def functions(doc: dict) -> set[str]:
    return {n["name"] for _, n in walk(doc)}


def test_own_ordinary_process_is_still_profiled(daemon: Daemon, user: pwd.struct_passwd,
                                                native_targets: Path) -> None:
    with Target([*as_user(user), str(native_targets / "cpu_burner"), "30"]) as own:
        r = attach(user, daemon, own.pid)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
    assert doc["pid"] == own.pid and doc["stats"]["cpu_samples"] > 0
    assert {"main", "outer", "hot_loop"} <= functions(doc)


def test_non_dumpable_own_process_is_refused(daemon: Daemon, user: pwd.struct_passwd) -> None:
    code = ("import ctypes, os, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0\n"
            "print('ready', os.getpid(), flush=True)\ntime.sleep(60)\n")
    with Target([*as_user(user), PY, "-c", code]) as t:
        assert status(t.pid, "Uid") == [str(user.pw_uid)] * 4  # the user's own process in every id
        assert os.stat(f"/proc/{t.pid}/mem").st_uid == 0  # ... and not dumpable
        refused(attach(user, daemon, t.pid), f"process {t.pid} is not dumpable")
        refused(attach(user, daemon, t.pid, "--gpu-activity"), f"process {t.pid} is not dumpable")


def test_process_with_an_ambient_capability_is_refused(daemon: Daemon, user: pwd.struct_passwd,
                                                       native_targets: Path) -> None:
    argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
            "--inh-caps", "+sys_nice", "--ambient-caps", "+sys_nice", "--", str(native_targets / "cpu_burner"), "30"]
    with Target(argv) as t:
        assert status(t.pid, "Uid") == [str(user.pw_uid)] * 4
        assert int(status(t.pid, "CapPrm")[0], 16) == 1 << 23  # CAP_SYS_NICE
        refused(attach(user, daemon, t.pid), f"process {t.pid} holds capabilities the caller lacks (CapPrm 0x800000)")


def test_root_process_whose_leader_took_the_users_ids_is_refused(daemon: Daemon, user: pwd.struct_passwd,
                                                                 native_targets: Path) -> None:
    """The leader thread took the user's ids with a raw setresuid; a worker thread stays root and burns CPU.
    The old rule read the leader only and returned root's samples."""
    argv = [str(native_targets / "thread_creds"), "leader", str(user.pw_uid), str(user.pw_gid)]
    with Target(argv) as t:
        worker = int(t.line.split()[2])
        assert status(t.pid, "Uid") == [str(user.pw_uid)] * 4 and status(t.pid, "Uid", worker) == ["0"] * 4
        assert os.stat(f"/proc/{t.pid}/mem").st_uid == user.pw_uid  # dumpable: only the worker differs
        refused(attach(user, daemon, t.pid), f"thread {worker} of process {t.pid} runs with other user or group ids")


def test_a_thread_id_is_refused_as_a_pid(daemon: Daemon, user: pwd.struct_passwd, native_targets: Path) -> None:
    """A worker thread of a root process takes the user's ids: its tid, passed as a pid, was authorized with
    that thread's credentials. Now a thread id is refused for what it is, for attach and stop alike."""
    argv = [str(native_targets / "thread_creds"), "worker", str(user.pw_uid), str(user.pw_gid)]
    with Target(argv) as t:
        worker = int(t.line.split()[2])
        assert status(t.pid, "Uid", worker) == [str(user.pw_uid)] * 4 and status(t.pid, "Uid") == ["0"] * 4
        refused(attach(user, daemon, worker), f"{worker} is a thread of process {t.pid}: attach to {t.pid}")
        r = cli_as(user, daemon, "stop", str(worker))
        assert r.returncode == 1 and f"{worker} is a thread of process {t.pid}" in r.stderr, r.stderr
        refused(attach(user, daemon, t.pid), f"process {t.pid} belongs to another user")
    with Target([*as_user(user), str(native_targets / "cpu_burner"), "30"]) as own:  # the user's own thread too
        sleeper = max(int(x) for x in os.listdir(f"/proc/{own.pid}/task"))
        assert sleeper != own.pid
        refused(attach(user, daemon, sleeper), f"{sleeper} is a thread of process {own.pid}: attach to {own.pid}")


@pytest.fixture
def setuid_spin(native_targets: Path) -> Iterator[Path]:
    """A copy of tests/targets/bin/setuid_spin, setuid root, in a root-owned folder every user may enter."""
    folder = Path(tempfile.mkdtemp(prefix="deepctx-setuid-", dir="/tmp"))
    try:
        os.chmod(folder, 0o755)
        prog = folder / "setuid_spin"
        shutil.copy(native_targets / "setuid_spin", prog)
        os.chown(prog, 0, 0)
        os.chmod(prog, 0o4755)
        yield prog
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_capture_ends_with_nothing_when_the_target_execs_a_setuid_program(daemon: Daemon, user: pwd.struct_passwd,
                                                                         setuid_spin: Path) -> None:
    t = StdinTarget([*as_user(user), "/bin/sh", "-c", f"echo ready $$; read x; exec {setuid_spin} 60"])
    try:
        capture = subprocess.Popen([*as_user(user), *DEEPCTX, "attach", str(t.pid), "--duration", "20", "--format",
                                    "json", "--quiet"], env=dict(daemon.env(), HOME="/"), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        wait_for(lambda: (session_of(daemon, t.pid) or {}).get("state") == "capturing", timeout=60,
                 what="the user's capture running")
        t.go()
        t.expect("spinning 0")  # euid 0 now, same pid
        out, err = capture.communicate(timeout=15)  # well before the 20 s asked for
    finally:
        t.stop()
    assert capture.returncode == 1, err
    assert (f"process {t.pid} changed its credentials during the capture (exec of a setuid program?): deepctx "
            "stopped and returns nothing") in err
    assert out == ""  # nothing of the samples taken at euid 0
