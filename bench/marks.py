"""Timing blocks of a free-running workload process (bench/workloads.py --marks), shared by the benches
that alternate blocks without and with the profiler in one process."""

from __future__ import annotations

import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# --pin: the workloads run on the first half of the CPUs and the daemon on the second half, so the run-to-run
# spread from the scheduler moving them about (30% for the launch-bound loop unpinned) does not hide a 1% cost.
PIN: dict[str, set[int]] = {}


def pin_halves(witness: bool = False) -> None:
    """witness: the workload half's last CPU goes to a witness process (gpu_overhead.py --witness)."""
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    PIN["workload"], PIN["daemon"] = set(cpus[:half]), set(cpus[half:]) or set(cpus)
    if witness:
        if half < 2:
            raise SystemExit(f"--witness needs a CPU of its own: {len(cpus)} CPUs leave the workload {half}")
        PIN["witness"] = {cpus[half - 1]}
        PIN["workload"] -= PIN["witness"]


def pin_process(pid: int, cpus: set[int]) -> None:
    """Every thread of the process (sched_setaffinity on a pid moves one thread only)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except OSError:
            pass  # a thread that exited meanwhile


def start_workload(name: str, python: str, args: list[str], env: dict[str, str] | None = None,
                   cpus: set[int] | None = None) -> tuple[subprocess.Popen, int]:
    """bench/workloads.py NAME ARGS..., on `cpus` (default: PIN["workload"]'s when pinned), once it says
    "ready"; returns it and its pid."""
    cpus = cpus or PIN.get("workload")
    p = subprocess.Popen([python, str(HERE / "workloads.py"), name, *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env if env is not None else dict(os.environ),
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    assert p.stdout is not None and p.stdin is not None
    ready = p.stdout.readline().split()
    assert ready and ready[0] == "ready", f"{name}: {ready}"
    return p, int(ready[1])


def start_marked(name: str, python: str, env: dict[str, str] | None = None, cpus: set[int] | None = None,
                 extra: list[str] | None = None) -> tuple[subprocess.Popen, int]:
    """A workload process that runs steps until its stdin closes, already started ("go" sent)."""
    p, pid = start_workload(name, python, ["0", "--marks", *(extra or [])], env, cpus)
    assert p.stdin is not None
    p.stdin.write("go\n")
    p.stdin.flush()
    return p, pid


def mark(p: subprocess.Popen) -> tuple[int, float, float]:
    """Steps done, the time and when the last of those steps ended (the process's perf_counter), from a
    process started with --marks."""
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write("mark\n")
    p.stdin.flush()
    f = p.stdout.readline().split()
    assert len(f) == 4 and f[0] == "mark", f"expected a mark, got {f}"
    return int(f[1]), float(f[2]), float(f[3])


def process_cpu_s(pid: int) -> float:
    """CPU seconds the process (all its threads) has run, in user and kernel mode (BPF handlers included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_steal() -> tuple[int, int]:
    """(steal, all) jiffies of the machine so far (/proc/stat): time the hypervisor gave to others."""
    cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (cpu[7] if len(cpu) > 7 else 0), sum(cpu)


def block(p: subprocess.Popen, seconds: float) -> dict:
    """Times SECONDS of the free-running loop between two marks; with the workload's CPU time per step
    and the machine's steal share over the block, to tell a slower loop from a host that ran less of it."""
    return blocks([p], seconds)[0]


def blocks(ps: list[subprocess.Popen], seconds: float) -> list[dict]:
    """block() for several free-running processes over the same SECONDS (marked one after the other)."""
    c0, s0 = [process_cpu_s(p.pid) for p in ps], machine_steal()
    m0 = [mark(p) for p in ps]
    time.sleep(seconds)  # the loops run on their own: this only sets the block's length
    m1 = [mark(p) for p in ps]
    c1, s1 = [process_cpu_s(p.pid) for p in ps], machine_steal()
    steal = (s1[0] - s0[0]) / max(s1[1] - s0[1], 1)
    out = []
    for (n0, t0, e0), (n1, t1, e1), a, b in zip(m0, m1, c0, c1, strict=True):
        # whole steps over the time between the ends of the first and the last: no step's worth of rounding
        rate = (n1 - n0) / (e1 - e0) if n1 > n0 else 0.0
        out.append({"steps": n1 - n0, "seconds": t1 - t0, "steps_per_s": rate,
                    "cpu_ms_per_step": 1000 * (b - a) / max(n1 - n0, 1), "steal_share": steal})
    return out


def finish(p: subprocess.Popen) -> None:
    """Closes the process's stdin (the loop ends after the step under way) and waits for it."""
    assert p.stdin is not None
    p.stdin.close()
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def neighbour_ratio(before: dict, on: dict, after: dict) -> float:
    """An on-block's ratio: the mean rate of the off-blocks either side over its own (cancels linear drift)."""
    return (before["steps_per_s"] + after["steps_per_s"]) / 2 / on["steps_per_s"]


def exit_on_sigterm() -> None:
    """SIGTERM (`timeout`, a killed job) ends the bench through its finally blocks, which stop the daemons
    and workloads it started: otherwise they outlive it and load the machine the next command measures on."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def mean_95(values: list[float]) -> tuple[float, float, float]:
    """The mean and its 95% interval (normal approximation; nan bounds for fewer than two values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half
