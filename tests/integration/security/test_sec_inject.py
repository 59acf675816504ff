"""Agent injection as users would attack it (issue #29, findings 1, 2 and the injection half of 5).

The review's attacks, run against a real deepctxd whose socket every user reaches: a user prepares a
trap in a new root (a chroot, in a user namespace of its own or root's), root runs `deepctx attach PID
--gpu-activity` on the chrooted process. The daemon used to copy the agent into the target's /tmp through
/proc/PID/root (following the user's symlinks, as root) and to dlopen whatever file was at that
predictable path. Now the target creates a memfd, the daemon fills and seals it through its own duplicate
(pidfd_getfd) and the target dlopens /proc/self/fd/N: nothing is written into the target's root and
nothing there is loaded. Pid binding (5) is checked at the module level with real processes."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import os
import pwd
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Daemon, StdinTarget, session_of, stop_daemon, wait_for
from users import as_user

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "integration" / "device"))
from device_paths import AGENT, MOCKS, TARGET, cupti_mocks_built, make_agents_and_mocks  # noqa: E402
from service_env import ServiceDir  # noqa: E402

from deepctx.daemon.errors import FailedPrecondition  # noqa: E402
from deepctx.daemon.inject import agent as agent_mod  # noqa: E402
from deepctx.daemon.inject import ptrace  # noqa: E402
from deepctx.host import procfs  # noqa: E402
from deepctx.host.process_handle import ProcessHandle  # noqa: E402

OLD_NAME = "libdeepctx_cupti.so"
# What the new root needs to run the mock target: the system, the repository (venv, mocks), /proc (the
# target opens /proc/self/fd/N) and /dev.
# the system, and this checkout (the target, the mocks, the virtualenv) wherever CI cloned it
BINDS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", str(REPO), "/proc", "/dev")


@pytest.fixture(scope="module")
def built() -> None:
    make_agents_and_mocks()
    if not cupti_mocks_built():
        pytest.skip("CUPTI headers not found (pip install nvidia-cuda-cupti): agent and mocks not built")


@pytest.fixture(scope="module")
def daemon(built: None) -> Iterator[Daemon]:
    sd = ServiceDir()
    d = sd.start()
    try:
        yield d
    finally:
        rc = stop_daemon(d)
        sd.remove()
        assert rc == 0, f"deepctxd exited with {rc}"


@pytest.fixture
def work() -> Iterator[Path]:
    """A folder of the test's own (root's, 0755), under /tmp."""
    p = Path(tempfile.mkdtemp(prefix="deepctx-sec-inject-", dir="/tmp"))
    os.chmod(p, 0o755)
    yield p
    subprocess.run(["rm", "-rf", "--one-file-system", str(p)], check=False)


def old_path() -> str:
    """Where the old daemon put (and trusted) the agent inside a target's root."""
    digest = hashlib.sha256(AGENT.read_bytes()).hexdigest()[:16]
    return f"tmp/deepctx-{digest}-{OLD_NAME}"


def chrooted(newroot: Path, userns: bool, binds_: tuple[str, ...] = BINDS) -> list[str]:
    """argv prefix: a private mount namespace (and a user namespace mapping the caller to root, as any
    user may make) whose new root `newroot` has the system bound in, then chroot into it."""
    binds = "; ".join(f"mount --rbind {d} {newroot}{d}" for d in binds_)
    script = f'set -e; {binds}; exec chroot {newroot} "$@"'
    return ["unshare", "-rm" if userns else "-m", "--propagation", "private", "sh", "-c", script, "sh"]


def mock_target(prefix: list[str]) -> StdinTarget:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
    return StdinTarget([*prefix, sys.executable, str(TARGET), str(MOCKS)], env=env)


def attach_gpu_activity(d: Daemon, t: StdinTarget) -> subprocess.CompletedProcess:
    """Root's `deepctx attach PID --gpu-activity` over one phase of the target's work."""
    with cf.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(d.cli, "attach", str(t.pid), "--duration", "300", "--gpu-activity", "--format", "json",
                          "--quiet", "--mode", "exact", timeout=120)
        wait_for(lambda: (session_of(d, t.pid) or {}).get("state") == "capturing" or fut.done(),
                 what="the capture running", timeout=120)
        if fut.done():
            return fut.result()
        t.go()
        t.expect("cupti")
        t.expect("done")
        stop = d.cli("stop", str(t.pid))
        assert stop.returncode == 0, stop.stderr
        return fut.result()


def agent_maps(pid: int) -> list[str]:
    return sorted({m.path for m in procfs.read_maps(pid) if "libdeepctx_cupti" in m.path})


def run_as(u: pwd.struct_passwd, script: str) -> None:
    subprocess.run([*as_user(u), "sh", "-c", script], check=True, timeout=60)


def test_a_planted_part_link_is_not_followed(daemon: Daemon, user: pwd.struct_passwd, work: Path) -> None:
    """Finding 1. The user makes a new root in a user namespace (any user may), plants the copy's
    `.part` name as a link to a root-owned 0600 file, and has root load the agent into its chrooted
    process. The old daemon copied the agent through the link (overwriting the file) and made it 0755."""
    secret = work / "secret"
    secret.write_bytes(b"root's secret\n")
    os.chmod(secret, 0o600)
    home = work / "home"
    home.mkdir()
    os.chown(home, user.pw_uid, user.pw_gid)
    newroot = home / "root"
    dirs = " ".join(str(newroot) + d for d in (*BINDS, "/tmp"))
    run_as(user, f"mkdir -p {dirs} && ln -s {secret} {newroot}/{old_path()}.part")
    before = sorted(os.listdir(newroot / "tmp"))
    t = mock_target([*as_user(user), *chrooted(newroot, userns=True)])
    try:
        r = attach_gpu_activity(daemon, t)
        mapped = agent_maps(t.pid)
    finally:
        t.stop()
    assert secret.read_bytes() == b"root's secret\n"
    st = secret.lstat()
    assert (st.st_mode & 0o7777, st.st_uid) == (0o600, 0)
    assert sorted(os.listdir(newroot / "tmp")) == before  # nothing created in the target's root
    # and the injection worked, from the daemon's memfd
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stats"]["device_agent_injected"] == 1
    assert mapped == [f"/memfd:{OLD_NAME} (deleted)"]


def test_a_planted_agent_is_never_loaded(daemon: Daemon, user: pwd.struct_passwd, work: Path) -> None:
    """Finding 2. Root's process runs in a chroot with a 1777 /tmp; a user plants a library at the old
    predictable path of the agent. The old daemon dlopened it in root's process (its constructor ran as
    uid 0); now it is never loaded: no marker, and the agent comes from the daemon's memfd."""
    newroot = work / "root"
    for d in BINDS:
        (newroot / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (newroot / "tmp").mkdir(exist_ok=True)
    os.chmod(newroot / "tmp", 0o1777)
    src = work / "planted.c"
    src.write_text('#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void ran(void) {\n'
                   '    FILE *f = fopen("/tmp/planted-ran", "w");\n'
                   '    if (f) { fprintf(f, "uid %d\\n", (int)getuid()); fclose(f); }\n}\n')
    built = work / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(built), str(src)], check=True, timeout=60)
    os.chmod(built, 0o755)
    run_as(user, f"cp {built} {newroot}/{old_path()}")
    planted = newroot / old_path()
    assert planted.stat().st_uid == user.pw_uid
    t = mock_target(chrooted(newroot, userns=False))  # root's process
    try:
        r = attach_gpu_activity(daemon, t)
        maps = procfs.read_maps(t.pid)
    finally:
        t.stop()
    assert not (newroot / "tmp" / "planted-ran").exists()  # its constructor never ran
    assert not any(planted.name in m.path for m in maps)  # never mapped
    assert planted.read_bytes() == built.read_bytes()
    assert r.returncode == 0, r.stderr
    assert sorted({m.path for m in maps if OLD_NAME in m.path}) == [f"/memfd:{OLD_NAME} (deleted)"]


def test_a_root_without_proc_is_refused_with_the_reason(daemon: Daemon, work: Path) -> None:
    """The one limit of loading from a memfd: the target opens /proc/self/fd/N, so a chroot without /proc
    cannot load the agent. The attach says why, and the target runs on unharmed."""
    newroot = work / "root"
    for d in (*BINDS, "/tmp"):
        (newroot / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
    before = sorted(os.listdir(newroot / "tmp"))  # the checkout's mount point, when it lies under /tmp
    t = mock_target(chrooted(newroot, userns=False, binds_=tuple(b for b in BINDS if b != "/proc")))
    try:
        r = attach_gpu_activity(daemon, t)
        assert r.returncode == 1
        assert "the target could not load the CUPTI agent: /proc/self/fd/" in r.stderr
        assert "the process's root has no /proc, as in a bare chroot" in r.stderr
        assert agent_maps(t.pid) == [] and sorted(os.listdir(newroot / "tmp")) == before
        wait_for(lambda: released(daemon, t.pid), what="the refused capture released")
        assert (f"/memfd:{OLD_NAME} (deleted)", True) not in daemon_fds(daemon)  # its sealed copy closed
        t.go()
        assert t.expect("cupti").split()[1] == "0"
        t.expect("done")
    finally:
        t.stop()


def released(d: Daemon, pid: int) -> bool:
    """The capture of pid has released its probes and program (the daemon logs it once it has)."""
    for line in d.log.read_text().splitlines():
        if line.startswith("{") and '"probes detached"' in line:
            e = json.loads(line)
            if e.get("msg") == "probes detached" and e.get("pid") == pid:
                return True
    return False


def daemon_fds(d: Daemon) -> list[tuple[str, bool]]:
    """(what each descriptor of the daemon names, opened for writing?)."""
    out = []
    for n in os.listdir(f"/proc/{d.proc.pid}/fd"):
        try:
            flags = int(Path(f"/proc/{d.proc.pid}/fdinfo/{n}").read_text().split("flags:")[1].split()[0], 8)
            out.append((os.readlink(f"/proc/{d.proc.pid}/fd/{n}"), flags & os.O_ACCMODE != os.O_RDONLY))
        except (FileNotFoundError, IndexError):  # closed meanwhile
            continue
    return sorted(out)


def test_the_agent_comes_from_a_memfd_and_no_descriptor_stays(daemon: Daemon) -> None:
    """In a target of the same root too: one mechanism. The daemon's sealed copy (its read-write
    duplicate of the target's memfd, through which its probes attach) is closed when each capture's
    probes are released: none is left after three injections into three processes. (Read-only views of
    the agent stay where the daemon caches symbols, one per build id, or until its garbage collector runs:
    pyelftools' reference cycles keep an mmap, and its descriptor, of every ELF file the daemon reads, so
    a plain count of descriptors is not exact from one capture to the next.)"""
    memfd = f"/memfd:{OLD_NAME} (deleted)"
    for _ in range(3):
        t = mock_target([])
        try:
            r = attach_gpu_activity(daemon, t)
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["stats"]["device_agent_injected"] == 1
            assert agent_maps(t.pid) == [memfd]
        finally:
            t.stop()
        wait_for(lambda pid=t.pid: released(daemon, pid), what="the capture released")
        assert (memfd, True) not in daemon_fds(daemon)


# --- finding 5: the pid bound from the check to the seize (module level, real processes) -------------------


def reap_and_reuse(pid: int, proc: subprocess.Popen, argv: list[str], env: dict[str, str]) -> StdinTarget | None:
    """Kills and reaps proc (pid), then starts argv as root so that it gets the same pid
    (kernel.ns_last_pid): the reuse a slow injection could meet. None if other forks kept taking it."""
    proc.kill()
    proc.wait()
    for _ in range(50):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        t = StdinTarget(argv, env=env)
        if t.pid == pid:
            return t
        t.stop()
    return None


def test_a_stale_handle_is_refused_before_any_ptrace(monkeypatch: pytest.MonkeyPatch, built: None) -> None:
    """The checked process exits and its pid goes to another process (root's, with CUDA, injectable by
    every check that reads /proc by number): inject_agent with the handle of the checked process refuses
    before any ptrace request, and the new process gets nothing."""
    seized: list[int] = []
    real_seize = ptrace.seize
    monkeypatch.setattr(ptrace, "seize", lambda tid: (seized.append(tid), real_seize(tid))[1])
    checked = mock_target([])
    handle = ProcessHandle.open(checked.pid)
    try:
        argv = [sys.executable, str(TARGET), str(MOCKS)]
        env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
        other = reap_and_reuse(checked.pid, checked.proc, argv, env)
        if other is None:
            pytest.skip("the pid could not be reused for the test (other processes kept taking it)")
        try:
            agent_mod.check_injectable(other.pid)  # what reads /proc by number sees an injectable process
            with pytest.raises(FailedPrecondition, match=f"process {checked.pid} exited"):
                agent_mod.inject_agent(handle, str(AGENT))
            assert seized == []
            assert agent_maps(other.pid) == []
        finally:
            other.stop()
    finally:
        handle.close()
        checked.stop()


def test_a_thread_not_of_the_handles_process_is_refused_after_the_seize(monkeypatch: pytest.MonkeyPatch,
                                                                         built: None) -> None:
    """The thread chosen by number is another process's by the time of the seize (as when the chosen
    thread exits and its number is reused): the seized thread is checked against the handle, let go
    untouched, and nothing is loaded anywhere."""
    checked = mock_target([])
    other = mock_target([])  # root's process that took the number
    monkeypatch.setattr(agent_mod, "choose_thread", lambda pid: other.pid)
    seized: list[int] = []
    real_seize = ptrace.seize
    monkeypatch.setattr(ptrace, "seize", lambda tid: (seized.append(tid), real_seize(tid))[1])
    try:
        with ProcessHandle.open(checked.pid) as handle:
            with pytest.raises(FailedPrecondition, match=f"thread {other.pid} is not a thread of process "
                                                         f"{checked.pid}"):
                agent_mod.inject_agent(handle, str(AGENT))
        assert seized == [other.pid]
        assert agent_maps(other.pid) == [] and agent_maps(checked.pid) == []
        status = Path(f"/proc/{other.pid}/status").read_text()
        assert "TracerPid:\t0\n" in status  # let go
        other.go()  # and it still works: a full phase, then exits normally
        other.expect("cupti")
        other.expect("done")
        assert other.proc.stdin is not None
        other.proc.stdin.close()
        assert other.proc.wait(timeout=30) == 0
    finally:
        other.stop()
        checked.stop()
