"""deepctxd killed with SIGKILL in the middle of a capture leaves no BPF program and no uprobe behind,
and a new deepctxd starts on the same socket and profiles."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness import StdinTarget, Target, cuda_runtime, session_of, stop_daemon, wait_for

RUNTIME_CALLS = Path(__file__).resolve().parents[2] / "targets" / "gpu" / "runtime_calls.py"
UPROBE_EVENTS = Path("/sys/kernel/tracing/uprobe_events")


def programs() -> set[int]:
    """Ids of every BPF program loaded in the kernel (bpftool's view)."""
    out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=True).stdout
    return {p["id"] for p in json.loads(out or "[]")}


def held_programs(pid: int) -> set[int]:
    """Ids of the BPF programs a process holds open, from /proc/<pid>/fdinfo."""
    ids = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) != "anon_inode:bpf-prog":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
        except OSError:
            continue  # closed meanwhile
        ids |= {int(line.split()[1]) for line in info.splitlines() if line.startswith("prog_id:")}
    return ids


def uprobe_lines() -> list[str]:
    return UPROBE_EVENTS.read_text().splitlines() if UPROBE_EVENTS.exists() else []


@pytest.mark.skipif(not shutil.which("bpftool"), reason="bpftool is not installed")
def test_sigkill_leaves_no_probes_and_a_restart_serves(service_dir, stopped, native_targets) -> None:
    d = service_dir.start()
    target = StdinTarget([sys.executable, str(RUNTIME_CALLS), "cuda", cuda_runtime()])
    pool = cf.ThreadPoolExecutor(1)
    try:
        fut = pool.submit(d.cli, "attach", str(target.pid), "--duration", "300", "--quiet", "--format", "json")
        wait_for(lambda: (session_of(d, target.pid) or {}).get("state") == "capturing", 120, "capture running")
        ours = held_programs(d.proc.pid)
        assert ours and ours <= programs()
        probes = json.loads(d.cli("status", "--format", "json").stdout)["sessions"][0]["stats"]
        assert int(probes["gpu_uprobes"]) > 0  # uprobes on the real CUDA runtime are attached
    finally:
        d.proc.send_signal(signal.SIGKILL)
        assert d.proc.wait(timeout=30) == -signal.SIGKILL
        target.stop()
    assert fut.result(timeout=60).returncode != 0  # the client saw the daemon go
    pool.shutdown()
    # its own programs and uprobes only: other test files' daemons load and attach theirs meanwhile
    wait_for(lambda: not (ours & programs()), 30, "the dead daemon's BPF programs to be released")
    assert not [line for line in uprobe_lines() if f"_bcc_{d.proc.pid}" in line]  # bcc's names end in its pid
    # a new daemon on the same socket and private directory
    d2 = service_dir.start()
    stopped.append(d2)
    with Target([str(native_targets / "cpu_burner"), "30"]) as burner:
        doc = d2.attach_json(burner.pid, "--duration", "1")
    assert doc["stats"]["cpu_samples"] > 0


def test_sigterm_delivered_to_another_thread_still_stops_the_daemon(service_dir) -> None:
    """Python runs signal handlers in the main thread; the kernel may hand a process's SIGTERM to any of its
    threads (it did, under another daemon's capture), and a main thread asleep without a timeout never woke
    for it: the daemon kept running. Sent here with tgkill to a thread that is not the main one."""
    import ctypes

    d = service_dir.start()
    libc = ctypes.CDLL(None, use_errno=True)

    def name(tid: str) -> str:
        try:
            return Path(f"/proc/{d.proc.pid}/task/{tid}/comm").read_text().strip()
        except OSError:  # a short-lived thread, gone already
            return ""

    # gRPC's timer thread lives as long as the server; any other thread if it has another name
    others = sorted((name(t) != "grpc_global_tim", int(t)) for t in os.listdir(f"/proc/{d.proc.pid}/task")
                    if int(t) != d.proc.pid)
    if not any(libc.syscall(234, d.proc.pid, tid, signal.SIGTERM) == 0 for _, tid in others):  # SYS_tgkill, x86-64
        stop_daemon(d)
        pytest.fail("no thread of deepctxd beside its main one took the signal")
    try:
        assert d.proc.wait(timeout=30) == 0
    except subprocess.TimeoutExpired:
        d.proc.kill()
        d.proc.wait()
        pytest.fail("deepctxd did not stop on a SIGTERM delivered to one of its other threads")
