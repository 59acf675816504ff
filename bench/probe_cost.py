"""What each BPF program costs per run, on the mock CUDA runtime (no GPU needed).

    sudo .venv/bin/python bench/probe_cost.py [--mode exact|sampled] [--no-python] [--uprobes] [--seconds 5]
        [--workload mock_launch|mock_launch_deep]

Runs the launch-bound loop's shape on the mock runtime and CUPTI (bench/workloads.py mock_launch: 100
launches and a synchronize a step, 25 Python frames deep) with the real CUPTI agent, captures it with the
GPU API and device-activity families as deepctxd composes them, and reads the kernel's own accounting of
each BPF program (kernel.bpf_stats_enabled: run count and run time, /proc/self/fdinfo) over --seconds.
Printed: runs and nanoseconds per run of every program that ran, and the loop's launches per second while
captured. The trap or call into the program is not in its run time; bench/gpu_overhead.py's mock_launch
workload measures the whole per-launch cost side by side. --uprobes: launches probed by uprobes instead
of left to the agent; --no-python: no Python walker; --workload mock_launch_deep: the launches from under 40
C frames that keep frame pointers (the native stack walk's cost per frame).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "integration" / "device")]

from capture_util import run_capture  # noqa: E402

from deepctx.probes.device_activity import DeviceActivity  # noqa: E402
from deepctx.probes.program_stats import STATS_SYSCTL, program_stats  # noqa: E402

AGENT = REPO / "native" / "build" / "libdeepctx_cupti.so"

LOOP = """
import sys, threading, time
sys.path.insert(0, {bench!r})
import workloads
step = getattr(workloads, {workload!r})()
stop = []
threading.Thread(target=lambda: (sys.stdin.read(), stop.append(1)), daemon=True).start()
print("ready", flush=True)
done, t0 = 0, time.perf_counter()
while not stop:
    step()
    done += 1
    if done % 200 == 0:
        print("steps", done, time.perf_counter() - t0, flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["exact", "sampled"], default="exact")
    ap.add_argument("--no-python", action="store_true")
    ap.add_argument("--uprobes", action="store_true", help="launches probed by uprobes, not left to the agent")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--workload", choices=["mock_launch", "mock_launch_deep"], default="mock_launch")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (BPF, and kernel.bpf_stats_enabled)")
    for folder in (REPO / "native", REPO / "tests" / "mocks", REPO / "tests" / "targets"):
        subprocess.run(["make", "-s", "-C", str(folder), f"PYTHON={sys.executable}"], check=True)
    env = dict(os.environ, CUDA_INJECTION64_PATH=str(AGENT))
    target = subprocess.Popen([sys.executable, "-c", LOOP.format(bench=str(REPO / "bench"), workload=args.workload)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    assert target.stdout is not None and target.stdin is not None
    assert target.stdout.readline().strip() == "ready"
    progress: list[tuple[int, float]] = []  # (steps done, seconds), as the loop reports them

    def read_progress() -> None:
        for line in target.stdout:
            w = line.split()
            if w and w[0] == "steps":
                progress.append((int(w[1]), float(w[2])))

    threading.Thread(target=read_progress, daemon=True).start()
    was = STATS_SYSCTL.read_text().strip()
    STATS_SYSCTL.write_text("1")
    stats: dict[str, tuple[int, int]] = {}
    rate: list[float] = []

    def work() -> None:
        start = progress[-1] if progress else (0, 0.0)
        time.sleep(args.seconds)  # the measured stretch: the loop runs on its own meanwhile
        end = progress[-1] if progress else start
        if end[1] > start[1]:
            rate.append(100 * (end[0] - start[0]) / (end[1] - start[1]))

    try:
        dev = DeviceActivity(sampling=args.mode == "sampled" and not args.uprobes)
        run_capture(target.pid, work, dev, python=not args.no_python, gpu_mode=args.mode,
                    agent_calls=not args.uprobes, before_flush=lambda bpf: stats.update(program_stats(bpf)))
    finally:
        STATS_SYSCTL.write_text(was)
        target.stdin.close()
        target.wait(timeout=30)
    how = "probed by uprobes" if args.uprobes else "left to the agent"
    print(f"{args.workload}: mode {args.mode}, python {'off' if args.no_python else 'on'}, launches {how}"
          + (f"; {rate[0]:,.0f} launches/s while captured" if rate else ""))
    print(f"{'program':28} {'runs':>10} {'ns/run':>8}")
    for name, (runs, ns) in sorted(stats.items(), key=lambda kv: -kv[1][1]):
        if runs:
            print(f"{name:28} {runs:10,} {ns / runs:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
