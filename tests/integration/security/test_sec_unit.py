"""The systemd unit's SystemCallFilter is complete: the real deepctxd, run under strace -f through a capture
of a Python target on the mock CUDA libraries with the CUPTI agent injected (`--gpu-activity`: ptrace,
memfd, pidfd_getfd), kernel stacks (/proc/kallsyms), the mock NVML, per-caller checks (`deepctx ps`, the
access-check thread's setgroups/setfsuid/capset) and a SIGTERM stop, makes only system calls that the
unit's filter allows, as systemd itself expands its groups (`systemd-analyze syscall-filter`).

A call missing from the filter would fail with EPERM under systemd (SystemCallErrorNumber=EPERM): this test
is what stands for starting the unit for real where PID 1 is not systemd."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness import DEEPCTXD, Daemon, StdinTarget, session_of, wait_for
from users import as_user, cli_as

REPO = Path(__file__).resolve().parents[3]
UNIT = REPO / "systemd" / "deepctxd.service"
DEVICE = REPO / "tests" / "integration" / "device"
sys.path.insert(0, str(DEVICE))
from device_paths import AGENT, MOCKS, TARGET, cupti_mocks_built, make_agents_and_mocks  # noqa: E402
from service_env import ServiceDir  # noqa: E402

pytestmark = pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")


def syscall_groups() -> dict[str, set[str]]:
    """systemd's own groups (`@name` -> members, groups and calls), as this systemd knows them."""
    out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    groups: dict[str, set[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = set()
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].add(line.strip())
    return groups


def expand(name: str, groups: dict[str, set[str]]) -> set[str]:
    if not name.startswith("@"):
        return {name}
    return set().union(*(expand(m, groups) for m in groups[name]))


def unit_allows(unit_text: str, groups: dict[str, set[str]]) -> set[str]:
    """The system calls that the unit's SystemCallFilter= lines allow, with systemd's rules: the first line
    is an allow-list (this unit's are), later plain lines add to it, `~` lines take from it; an allow-list
    always admits @default."""
    lines = re.findall(r"^SystemCallFilter=(.*)$", unit_text, re.M)
    assert lines and not lines[0].startswith("~"), "the unit's SystemCallFilter= is not an allow-list"
    allowed = expand("@default", groups)
    for line in lines:
        deny = line.startswith("~")
        names = set().union(*(expand(n, groups) for n in line.lstrip("~").split()))
        allowed = allowed - names if deny else allowed | names
    return allowed


CALL = re.compile(r"^\d+ +(?:<\.\.\. )?([a-z_][a-z0-9_]*)(?:\(| resumed>)")
OPEN = re.compile(r'^\d+ +open(?:at)?\((?:AT_FDCWD, )?"([^"]*)", ([A-Z_|]+)')
SOCKET = re.compile(r"^\d+ +socket(?:pair)?\((AF_[A-Z0-9]+)")
# What DevicePolicy=closed always leaves (systemd.resource-control(5)), and the unit's DeviceAllow= (NVML's
# nodes: char-nvidia, char-nvidia-caps).
DEVICES = re.compile(r"/dev/(null|zero|full|random|urandom|tty|ptmx|pts/.*|nvidiactl|nvidia\d+|nvidia-caps/.*)")


def traced(log: Path) -> tuple[set[str], list[tuple[str, str]], set[str]]:
    """(every system call name, every (path, flags) opened by absolute path, every socket family) in an
    `strace -f` log."""
    calls, opens, families = set(), [], set()
    for line in log.read_text(errors="replace").splitlines():
        if m := CALL.match(line):
            calls.add(m.group(1))
        if m := OPEN.match(line):
            opens.append((m.group(1), m.group(2)))
        if m := SOCKET.match(line):
            families.add(m.group(1))
    assert calls, log.read_text()[-2000:]
    return calls, opens, families


def unit_paths(unit_text: str, key: str) -> list[str]:
    return [p.lstrip("-") for line in re.findall(rf"^{key}=(.*)$", unit_text, re.M) for p in line.split()]


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def test_filter_admits_the_expected_calls() -> None:
    """What access.py, the injection, bcc and Python need beyond @system-service, and none of what the unit
    denies: a check of the parser above on known names as much as of the unit."""
    groups = syscall_groups()
    allowed = unit_allows(UNIT.read_text(), groups)
    needed = {"bpf", "perf_event_open", "ptrace", "process_vm_readv", "pidfd_open", "pidfd_getfd",
              "pidfd_send_signal", "memfd_create", "setgroups", "setfsuid", "setfsgid", "capset", "execve"}
    assert needed <= allowed, sorted(needed - allowed)
    never = {"mount", "umount2", "reboot", "kexec_load", "swapon", "init_module", "finit_module", "iopl",
             "ioperm", "modify_ldt", "settimeofday", "clock_settime", "adjtimex", "uselib"}
    assert not never & allowed, sorted(never & allowed)


@pytest.mark.skipif(not shutil.which("strace"), reason="strace is not installed (apt-get install strace): the "
                    "unit's system call filter cannot be checked against the daemon's calls")
def test_every_call_of_a_real_capture_is_allowed(user: pwd.struct_passwd, tmp_path: Path) -> None:
    """A user's capture of their own process: the request is checked as the user (access.py's thread), the
    agent injected into the user's process, kernel stacks symbolized."""
    if os.geteuid() != 0:
        pytest.skip("needs root and a kernel with BPF")
    make_agents_and_mocks()
    if not cupti_mocks_built():
        pytest.skip("CUPTI headers not found (pip install nvidia-cuda-cupti): agent and mocks not built")
    allowed = unit_allows(UNIT.read_text(), syscall_groups())
    svc = ServiceDir()  # a folder every user may enter: the socket's, with the store, cache and mock GPU
    sock, log, trace, gpu = svc.path / "deepctxd.sock", svc.path / "deepctxd.log", tmp_path / "strace", svc.path / "gpu"
    gpu.mkdir()
    gpu.chmod(0o777)  # the user's target writes its device state there, the daemon's mock NVML reads it
    env = dict(os.environ, DEEPCTX_NVML_LIB=str(MOCKS / "libnvidia-ml.so.1"), MOCK_GPU_DIR=str(gpu))
    with open(log, "w") as out:
        proc = subprocess.Popen(["strace", "-f", "-qq", "-o", str(trace), *DEEPCTXD, "--foreground",
                                 "--socket", str(sock), "--log-format", "json", "--config", str(svc.config())],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    d = Daemon(proc, str(sock), log)
    t = None
    try:
        r = d.cli("status", "--wait", "60")
        assert r.returncode == 0, f"deepctxd did not come up under strace: {r.stderr}\n{log.read_text()[-3000:]}"
        t = StdinTarget([*as_user(user), sys.executable, str(TARGET), str(MOCKS)],
                        env={k: v for k, v in env.items() if k != "CUDA_INJECTION64_PATH"} | {"HOME": "/"})
        assert AGENT.exists()
        ps = cli_as(user, d, "ps", "--format", "json")
        assert ps.returncode == 0, ps.stderr
        with cf.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(cli_as, user, d, "attach", str(t.pid), "--duration", "300", "--quiet", "--mode",
                              "exact", "--gpu-activity", "--kernel-stacks", "--format", "json", timeout=120)
            wait_for(lambda: (session_of(d, t.pid) or {}).get("state") == "capturing" or fut.done(),
                     what="the capture running", timeout=90)
            assert not fut.done(), fut.result().stderr
            t.go()
            assert t.expect("cupti").split()[1] == "1"  # the injected agent holds CUPTI
            t.expect("done")
            assert cli_as(user, d, "stop", str(t.pid)).returncode == 0
            r = fut.result()
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["stats"]["device_agent_injected"] == 1  # the injection path ran, not an agent found
    finally:
        if t is not None:
            t.stop()
        if proc.poll() is None:  # strace ignores SIGTERM with -o: deepctxd (its child) gets it
            for pid in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
                os.kill(int(pid), signal.SIGTERM)
        rc = proc.wait(timeout=60)  # strace exits with deepctxd's status
        daemon_log = log.read_text()
        svc.remove()
    assert rc == 0, daemon_log[-3000:]
    made, opens, families = traced(trace)
    assert not made - allowed, (f"deepctxd made system calls that the unit's SystemCallFilter refuses: "
                                f"{sorted(made - allowed)}")
    assert {"bpf", "perf_event_open", "ptrace", "setfsuid"} <= made  # the capture really ran under strace
    assert any(p == "/proc/kallsyms" for p, _ in opens)  # --kernel-stacks: why ProtectKernelTunables is by hand
    unit = UNIT.read_text()
    read_only, hidden = unit_paths(unit, "ReadOnlyPaths"), unit_paths(unit, "InaccessiblePaths")
    writes = {p for p, flags in opens if under(p, read_only) and re.search(r"O_WRONLY|O_RDWR|O_CREAT", flags)}
    assert not writes, f"deepctxd opened for writing what the unit makes read-only: {sorted(writes)}"
    assert not {p for p, _ in opens if under(p, hidden)}
    assert families <= set(" ".join(re.findall(r"^RestrictAddressFamilies=(.*)$", unit, re.M)).split()), families
    devices = {p for p, _ in opens if p.startswith("/dev/") and not p.startswith(("/dev/shm/", "/dev/mqueue/"))}
    refused = {p for p in devices if not DEVICES.fullmatch(p)}
    assert not refused, f"devices that the unit's DevicePolicy=closed and DeviceAllow= refuse: {sorted(refused)}"
