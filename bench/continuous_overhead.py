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

    sudo python3 bench/continuous_overhead.py --workloads launch_bound --alternate 20 [--repeat 5] [--pin]

--alternate SECONDS measures in one process instead, for the launch-bound loop, whose step rate differs by up
to 30% from one process to the next (pinned or not) and so hides a 1% cost between separate runs. Per workload
it starts one process (bench/workloads.py --marks), lets it warm up (--warm), and then times blocks of SECONDS
of its free-running loop, off, on, off, on, ..., off (--repeat on-blocks between repeat+1 off-blocks): an
off-block has no daemon; an on-block starts a continuous daemon, waits until it captures the process (then
--settle seconds, default 0: the capture's start counts, as in the runs above), times the block and stops the
daemon. The blocks are timed by the process itself ("mark" on its stdin: steps done and time.perf_counter()),
so the loop never stops and the step rate of a block is its whole steps over the time between the ends of the
last steps before its two marks. Every block runs in the same process (same memory layout, same CPUs, same
CUDA context), so the process-to-process spread is gone; what remains is drift (clocks, temperature, the rest
of the machine), and each on-block's ratio is the mean of the off-blocks either side of it over its own rate,
which cancels drift that is linear over the three blocks.
Reported: a row per block, then per workload the median, mean, min and max of the on-blocks' ratios and the
overall ratio (mean of all off rates / mean of all on rates). The daemon cuts windows every 10 s by default:
make SECONDS a multiple of 10, so that each on-block spans whole windows, including the share of each window
the GPU probes are attached (--gpu-duty).
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
from gpu_overhead import AGENT, Deepctx, cpu_s, doc_nodes, rss_mb  # noqa: E402
from marks import (  # noqa: E402
    PIN,
    block,
    exit_on_sigterm,
    finish,
    neighbour_ratio,
    pin_halves,
    pin_process,
    start_marked,
    start_workload,
)

STEPS = {"launch_bound": 12000, "launch_backward": 4000, "resnet50": 300, "gpt2": 150, "jax": 3000}


class ContinuousDaemon(Deepctx):
    def __init__(self, cli: list[str], daemon: list[str], gpu_duty: float | None = None, **kw: object) -> None:
        """kw: Deepctx's (the log file and its level)."""
        duty = f"continuous_gpu_duty = {gpu_duty}\n" if gpu_duty is not None else ""  # None: the default
        super().__init__(cli, daemon + ["--continuous"], 'store_path = "{tmp}/windows.db"\n' + duty, **kw)

    def windows(self) -> int:
        st = json.loads(self.run("status", "--format", "json").stdout)
        return int((st.get("totals") or {}).get("continuous_windows", 0))


# --agent: the workloads start with the CUPTI agent (as `deepctx run` starts them), so the continuous
# daemon records their device activity too, on the GPU probes' duty cycle.
ENV: dict[str, str] = {}


def start(name: str, python: str, steps: int) -> tuple[subprocess.Popen, int]:
    return start_workload(name, python, [str(steps)], dict(os.environ) | ENV)


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
        wait_captured(daemon, [pid for _, pid in procs])
        before = daemon_before(daemon)
    sps = timed([p for p, _ in procs])
    row["steps_per_s"] = statistics.median(sps)
    if daemon is not None:
        row |= daemon_since(daemon, before)
        if ENV:
            row |= device_totals(daemon, [pid for _, pid in procs])
    return row


def wait_captured(daemon: ContinuousDaemon, pids: list[int]) -> None:
    deadline = time.monotonic() + 60
    while not all(daemon.capturing(pid) for pid in pids):
        assert time.monotonic() < deadline, "the continuous daemon did not pick the targets up"
        time.sleep(0.2)  # polling the daemon's status, with a deadline


def daemon_before(daemon: ContinuousDaemon) -> tuple[float, int, float]:
    return cpu_s(daemon.proc.pid), daemon.windows(), time.perf_counter()


def daemon_since(daemon: ContinuousDaemon, before: tuple[float, int, float]) -> dict:
    """The daemon's CPU share, RSS and windows stored since `before` (daemon_before())."""
    c0, w0, t0 = before
    wall = time.perf_counter() - t0
    return {"daemon_cpu_share": (cpu_s(daemon.proc.pid) - c0) / wall, "daemon_rss_mb": rss_mb(daemon.proc.pid),
            "daemon_anon_mb": rss_mb(daemon.proc.pid, "RssAnon"), "windows": daemon.windows() - w0,
            "seconds": wall}


def device_totals(daemon: ContinuousDaemon, pids: list[int]) -> dict:
    """--agent: what the stored windows say of the targets' device activity (their last window is stored
    once they have exited: waited for with a deadline)."""
    out: dict = {}
    deadline = time.monotonic() + 30
    for pid in pids:
        while True:
            r = subprocess.run(daemon.cli + ["profile", "--pid", str(pid), "--since", "10m", "--format", "json"],
                               env=daemon.env, capture_output=True, text=True)
            doc = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}
            stats = doc.get("stats") or {}
            if stats.get("device_records") or time.monotonic() > deadline:
                break
            time.sleep(1)
        total = sum(n["metrics"].get("gpu_time_ns", 0) for n in doc_nodes(doc))  # on kernel, copy, sync nodes
        out.setdefault("gpu_time_ms", []).append(round(total / 1e6, 1))
        for k in ("device_records", "device_records_unknown_correlation", "device_probe_resumes",
                  "gpu_probe_duty_permille"):
            out.setdefault(k, []).append(stats.get(k))
    return out


def alternate(name: str, args: argparse.Namespace) -> list[dict]:
    """One process, blocks off, on, ..., off (args.repeat on-blocks): a row each, on-blocks' with a ratio."""
    p, pid = start_marked(name, args.python, dict(os.environ) | ENV)
    rows: list[dict] = []
    try:
        time.sleep(args.warm)
        for i in range(2 * args.repeat + 1):
            row: dict = {"workload": name, "variant": "continuous" if i % 2 else "alone", "mode": "alternate",
                         "block": i, "targets": 1}
            if i % 2 == 0:
                row.update(block(p, args.alternate))
                if rows:  # the on-block before this one has both its neighbours now
                    on = rows[-1]
                    on["ratio"] = neighbour_ratio(rows[-2], on, row)
                    print(json.dumps(on), flush=True)
                rows.append(row)
                print(json.dumps(row), flush=True)
                continue
            daemon = ContinuousDaemon(args.deepctx.split(), args.deepctxd.split(), args.gpu_duty)
            try:
                if PIN:
                    pin_process(daemon.proc.pid, PIN["daemon"])  # threads it starts later inherit the mask
                wait_captured(daemon, [pid])
                time.sleep(args.settle)  # a chosen delay before timing, not synchronization
                before = daemon_before(daemon)
                row.update(block(p, args.alternate))
                row |= {k: v for k, v in daemon_since(daemon, before).items() if k != "seconds"}  # the block's own
            finally:
                daemon.stop()
            rows.append(row)  # printed with its ratio after the next off-block
    finally:
        finish(p)
    return rows


def alternate_summary(name: str, rows: list[dict]) -> dict:
    off = [r["steps_per_s"] for r in rows if r["variant"] == "alone"]
    on = [r for r in rows if r["variant"] == "continuous"]
    ratios = [r["ratio"] for r in on]
    return {"workload": name, "variant": "summary", "mode": "alternate", "blocks_on": len(on),
            "ratio_median": statistics.median(ratios), "ratio_mean": statistics.fmean(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ratio_stdev": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
            "ratio_overall": statistics.fmean(off) / statistics.fmean(r["steps_per_s"] for r in on),
            "off_steps_per_s": statistics.fmean(off), "off_min": min(off), "off_max": max(off),
            "on_steps_per_s": statistics.fmean(r["steps_per_s"] for r in on),
            "daemon_cpu_share": statistics.median(r["daemon_cpu_share"] for r in on),
            "daemon_rss_mb": max(r["daemon_rss_mb"] for r in on), "windows": sum(r["windows"] for r in on)}


def main_alternate(args: argparse.Namespace) -> int:
    rows: list[dict] = []
    summaries: list[dict] = []
    for name in args.workloads.split(","):
        got = alternate(name, args)
        rows += got
        summaries.append(alternate_summary(name, got))
    print(f"\n{'workload':15} {'blocks':>6} {'off steps/s':>11} {'on':>9} {'ratio median':>12} {'mean':>6} "
          f"{'min':>6} {'max':>6} {'overall':>7} {'off spread':>10} {'daemon CPU':>10} {'RSS MB':>7} "
          f"{'windows':>7}")
    for s in summaries:
        print(f"{s['workload']:15} {s['blocks_on']:6d} {s['off_steps_per_s']:11.2f} "
              f"{s['on_steps_per_s']:9.2f} {s['ratio_median']:12.4f} {s['ratio_mean']:6.4f} "
              f"{s['ratio_min']:6.4f} {s['ratio_max']:6.4f} {s['ratio_overall']:7.4f} "
              f"{s['off_max'] / s['off_min']:10.4f} {100 * s['daemon_cpu_share']:9.1f}% "
              f"{s['daemon_rss_mb']:7.0f} {s['windows']:7d}")
    for s in summaries:
        print(json.dumps(s), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows + summaries, indent=1))
    return 0


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
    ap.add_argument("--alternate", type=float, metavar="SECONDS",
                    help="one process per workload, blocks of SECONDS without and with a daemon, alternating "
                         "(a multiple of the 10 s window); --repeat on-blocks")
    ap.add_argument("--warm", type=float, default=5.0,
                    help="--alternate: seconds the loop runs before the first block")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="--alternate: seconds from the capture's start to the on-block's start")
    ap.add_argument("--agent", action="store_true",
                    help="the workloads carry the CUPTI agent (device activity on the duty cycle)")
    ap.add_argument("--out")
    args = ap.parse_args()
    exit_on_sigterm()
    names = args.workloads.split(",")
    if args.pin:
        pin_halves()
    if args.agent:
        ENV["CUDA_INJECTION64_PATH"] = str(AGENT)
    if args.alternate:
        if args.repeat < 1:
            ap.error("--alternate needs --repeat 1 or more (on-blocks)")
        return main_alternate(args)
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
