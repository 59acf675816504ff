"""What `deepctxd --continuous` costs the GPU jobs it watches, side by side in one run.

    sudo python3 bench/continuous_overhead.py [--workloads launch_bound,resnet50,gpt2] [--repeat 2]
        [--targets 3] [--out results.json]

Blocks alternate: every workload alone (no daemon), then every workload under a continuous daemon at its
default settings (19 Hz CPU sampling, sampled GPU call paths, 10 s windows into the window store). Each
run starts a fresh process (bench/workloads.py), waits until the daemon profiles it, then times the
steps, which last long enough to span window cuts. Then --targets launch-bound processes run at once,
alone and under one daemon, for the daemon's CPU and memory with several targets (their baseline is as many
processes alone: they share the GPU). --gpu-duty sets the share of each window the
GPU API probes are attached (1.0: always, the counts exact). Reported per workload: steps/s (median),
ratio (alone / continuous), and the daemon's CPU (share of one core) and RSS over the timed steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpu_overhead import Deepctx, cpu_s, rss_mb  # noqa: E402

STEPS = {"launch_bound": 12000, "launch_backward": 4000, "resnet50": 300, "gpt2": 150, "jax": 3000}


class ContinuousDaemon(Deepctx):
    def __init__(self, cli: list[str], daemon: list[str], gpu_duty: float | None = None) -> None:
        duty = f"continuous_gpu_duty = {gpu_duty}\n" if gpu_duty is not None else ""  # None: the default
        super().__init__(cli, daemon + ["--continuous"], 'store_path = "{tmp}/windows.db"\n' + duty)

    def windows(self) -> int:
        st = json.loads(self.run("status", "--format", "json").stdout)
        return int((st.get("totals") or {}).get("continuous_windows", 0))


# --pin: the workloads run on the first half of the CPUs and the daemon on the second half, so the run-to-run
# spread from the scheduler moving them about (30% for the launch-bound loop unpinned) does not hide a 1% cost.
PIN: dict[str, set[int]] = {}


def pin_halves() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    PIN["workload"], PIN["daemon"] = set(cpus[:half]), set(cpus[half:]) or set(cpus)


def pin_process(pid: int, cpus: set[int]) -> None:
    """Every thread of the process (sched_setaffinity on a pid moves one thread only)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except OSError:
            pass  # a thread that exited meanwhile


def start(name: str, python: str, steps: int) -> tuple[subprocess.Popen, int]:
    cpus = PIN.get("workload")
    p = subprocess.Popen([python, str(HERE / "workloads.py"), name, str(steps)], stdin=subprocess.PIPE,
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    ready = p.stdout.readline().split()
    assert ready and ready[0] == "ready", f"{name}: {ready}"
    return p, int(ready[1])


def timed(ps: list[subprocess.Popen]) -> list[float]:
    for p in ps:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    out = []
    for p in ps:
        assert p.stdout is not None and p.stdin is not None
        out.append(float(p.stdout.readline().split()[1]))
        p.stdin.close()
        p.wait(timeout=120)
    return out


def one(name: str, python: str, daemon: ContinuousDaemon | None, targets: int = 1) -> dict:
    procs = [start(name, python, STEPS[name]) for _ in range(targets)]
    row: dict = {"workload": name, "variant": "continuous" if daemon else "alone", "targets": targets}
    if daemon is not None:
        deadline = time.monotonic() + 60
        while not all(daemon.capturing(pid) for _, pid in procs):
            assert time.monotonic() < deadline, "the continuous daemon did not pick the targets up"
            time.sleep(0.2)
        c0, w0, t0 = cpu_s(daemon.proc.pid), daemon.windows(), time.perf_counter()
    sps = timed([p for p, _ in procs])
    row["steps_per_s"] = statistics.median(sps)
    if daemon is not None:
        wall = time.perf_counter() - t0
        row["daemon_cpu_share"] = (cpu_s(daemon.proc.pid) - c0) / wall
        row["daemon_rss_mb"] = rss_mb(daemon.proc.pid)
        row["daemon_anon_mb"] = rss_mb(daemon.proc.pid, "RssAnon")
        row["windows"] = daemon.windows() - w0
        row["seconds"] = wall
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="launch_bound,resnet50,gpt2")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--targets", type=int, default=3)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--deepctx", default="deepctx")
    ap.add_argument("--deepctxd", default="deepctxd")
    ap.add_argument("--gpu-duty", type=float, help="continuous_gpu_duty (default: the daemon's, 0.02)")
    ap.add_argument("--pin", action="store_true", help="workloads on the first half of the CPUs, the daemon on the rest")
    ap.add_argument("--out")
    args = ap.parse_args()
    names = args.workloads.split(",")
    if args.pin:
        pin_halves()
    rows: list[dict] = []
    for _ in range(args.repeat):
        for variant in ("alone", "continuous"):
            daemon = ContinuousDaemon(args.deepctx.split(), args.deepctxd.split(), args.gpu_duty) if variant == "continuous" else None
            if daemon is not None and PIN:
                pin_process(daemon.proc.pid, PIN["daemon"])  # threads it starts later inherit the mask
            try:
                for name in names:
                    rows.append(one(name, args.python, daemon))
                    print(json.dumps(rows[-1]), flush=True)
                if args.targets > 1 and not any(r["targets"] > 1 and r["variant"] == variant for r in rows):
                    # several targets share the GPU: their baseline is as many alone, not one
                    rows.append(one("launch_bound", args.python, daemon, args.targets))
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                if daemon is not None:
                    daemon.stop()
    print(f"\n{'workload':15} {'targets':>7} {'steps/s alone':>13} {'continuous':>10} {'ratio':>6} {'daemon CPU':>10} "
          f"{'RSS MB':>7} {'windows':>7}")
    for name in dict.fromkeys(names + ["launch_bound"]):  # the several-targets row is a launch-bound one
        for n in sorted({r["targets"] for r in rows if r["workload"] == name}):
            alone = [r["steps_per_s"] for r in rows if r["workload"] == name and r["variant"] == "alone" and r["targets"] == n]
            cont = [r for r in rows if r["workload"] == name and r["variant"] == "continuous" and r["targets"] == n]
            if not alone or not cont:
                continue
            a, c = statistics.median(alone), statistics.median(r["steps_per_s"] for r in cont)
            print(f"{name:15} {n:7d} {a:13.2f} {c:10.2f} {a / c:6.3f} "
                  f"{100 * statistics.median(r['daemon_cpu_share'] for r in cont):9.1f}% "
                  f"{max(r['daemon_rss_mb'] for r in cont):7.0f} {sum(r['windows'] for r in cont):7d}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
