"""What the GPU probes and the device-activity agent cost while attached, from sub-second stretches of one
process: the continuous daemon's duty cycle attaches them for half of each short window and detaches them for
the other half, and every attached stretch is paired with the detached stretches either side of it.

    sudo python3 bench/duty_pairs.py [--workloads resnet50,gpt2,launch_bound] [--seconds 120] [--period 2]
        [--duty 0.5] [--mode sampled|exact] [--pin] [--no-agent] [--keep FOLDER] [--out results.json]
    python3 bench/duty_pairs.py --reanalyse FOLDER --workloads NAME [--guard 0.15]   (a --keep folder again)
    python3 bench/duty_pairs.py --torch-profiler [--workloads ...] [--seconds 120] [--period 2] [--pin]

Blocks of several seconds (gpu_overhead.py --alternate) leave the host's drift in the ratio: on the GPU host
the alone rate of one ResNet-50 process moved 10 to 20% within a minute, against a budget of 1%. Here the
stretches are about half a second long, so a drift has no time to build up between an attached stretch and
its neighbours, and a two-minute run gives about sixty pairs.

Per workload: one process (bench/workloads.py --marks --step-times), started with the CUPTI agent (as
`deepctx run` starts it; --no-agent: without), and one `deepctxd --continuous` with continuous_window_s =
PERIOD and continuous_gpu_duty = 0.5, which logs when each switch began and ended (debug log, the monotonic
clock). The process writes the end of every step (the same clock) as it exits. A stretch runs from the end
of one switch plus --guard seconds (the agent starts and stops CUPTI within its watcher's 100 ms) to the
start of the next switch; its steps are those that began and ended inside it. What is measured is the steady
cost of the GPU call paths (sampled, as `deepctx attach`'s default, or with --mode exact every call's) and of
device activity while attached, less the capture's start and end, not the switches themselves. CPU sampling
(19 Hz) runs throughout and so cancels out.

Reported per workload: the pairs' ratios (an attached stretch's mean step time over the mean of its two
detached neighbours'), their median, mean and the mean's 95% interval, and the pooled ratio (all attached
step time per step over all detached); the same pairs by the stretches' median step times ("median steps":
one slow step, a host hiccup, moves a stretch's mean but not its median); and the median seconds an attach
and a detach took.

--torch-profiler pairs torch.profiler (CPU + CUDA activities) the same way, for issue #31's "below
torch.profiler in the same run": no daemon and no agent; the workload's own loop starts the profiler for the
first half of every --period and stops it for the second (bench/workloads.py --profiler-duty), and logs its
switches in the daemon log's shape. A stop processes the stretch's events inside its switch. What CUPTI keeps
after Kineto's first start (it stays loaded) is in every detached stretch too, so the rate before the first
switch is reported beside the detached stretches' (`before_steps_per_s`): a residue shows as a gap between them.

The cycle cost (--duty 0.1 --period 2 is what `deepctx attach --gpu-duty 0.1` runs): each whole cycle, from
one attach's start to the next's, switches and after-effects included, as its mean step time over the mean
of its clean steps (those beginning --clean seconds or more after its detach ended). Pairs measure the
attached share alone; the cycle cost is what a capture on that duty cycle costs the target.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpu_overhead import AGENT, Deepctx  # noqa: E402
from marks import PIN, exit_on_sigterm, finish, mean_95, pin_halves, pin_process, start_marked  # noqa: E402

SWITCHED = "GPU probes switched"  # daemon/capture.py's log message


@dataclass(frozen=True)
class Switch:
    attached: bool  # the state it switched to
    began: float  # time.monotonic()
    ended: float


@dataclass(frozen=True)
class Stretch:
    attached: bool
    start: float
    end: float
    steps: int
    seconds: float  # from the end of the step before its first to the end of its last
    median_step_s: float = math.nan  # the median of its steps' times: a few slow steps do not move it

    @property
    def step_s(self) -> float:
        return self.seconds / self.steps


def read_switches(log_lines: list[str], pid: int) -> list[Switch]:
    """The duty cycle's switches for pid from a JSON daemon log, in order."""
    out = []
    for line in log_lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("msg") == SWITCHED and rec.get("pid") == pid:
            out.append(Switch(bool(rec["attached"]), float(rec["from_mono"]), float(rec["to_mono"])))
    return sorted(out, key=lambda s: s.began)


def stretches(switches: list[Switch], ends: list[float], guard_s: float, min_steps: int = 3) -> list[Stretch | None]:
    """A stretch between each switch and the next (None where fewer than min_steps steps fit inside it);
    ends: every step's end, in order."""
    out: list[Stretch | None] = []
    for a, b in zip(switches, switches[1:], strict=False):
        start, end = a.ended + guard_s, b.began
        first = bisect.bisect_left(ends, start)  # the end of the step before the stretch's first step
        last = bisect.bisect_right(ends, end) - 1
        n = last - first
        if n < min_steps:
            out.append(None)
            continue
        median = statistics.median(ends[k + 1] - ends[k] for k in range(first, last))
        out.append(Stretch(a.attached, start, end, n, ends[last] - ends[first], median))
    return out


def pairs(seq: list[Stretch | None], median: bool = False) -> list[float]:
    """Each attached stretch's mean step time over the mean of its detached neighbours' (both present);
    median: their median step times instead."""
    out = []
    for before, on, after in zip(seq, seq[1:], seq[2:], strict=False):
        if on is None or before is None or after is None or not on.attached or before.attached or after.attached:
            continue
        if median:
            out.append(on.median_step_s / ((before.median_step_s + after.median_step_s) / 2))
        else:
            out.append(on.step_s / ((before.step_s + after.step_s) / 2))
    return out


def summary(seq: list[Stretch | None]) -> dict:
    ratios = pairs(seq)
    on = [s for s in seq if s is not None and s.attached]
    off = [s for s in seq if s is not None and not s.attached]
    out: dict = {"pairs": len(ratios), "stretches_on": len(on), "stretches_off": len(off)}
    if on and off:
        out["pooled_ratio"] = (sum(s.seconds for s in on) / sum(s.steps for s in on)) / \
                              (sum(s.seconds for s in off) / sum(s.steps for s in off))
        out["off_steps_per_s"] = sum(s.steps for s in off) / sum(s.seconds for s in off)
        out["on_steps_per_s"] = sum(s.steps for s in on) / sum(s.seconds for s in on)
        out["steps_per_stretch"] = statistics.median(s.steps for s in on + off)
    for prefix, rs in (("ratio", ratios), ("median_step_ratio", pairs(seq, median=True))):
        if not rs:
            continue
        out[f"{prefix}_median"] = statistics.median(rs)
        out[f"{prefix}_mean"], lo, hi = mean_95(rs)
        if len(rs) > 1:
            out[f"{prefix}_mean_95"] = [lo, hi]
    return out


def cycle_costs(switches: list[Switch], ends: list[float], clean_s: float, min_steps: int = 5) -> list[float]:
    """What each whole duty cycle cost, switches included (what `--gpu-duty` costs a capture): from one
    attach's start to the next's, the cycle's mean step time over the mean of its clean steps, those that
    began clean_s or more after its detach ended. None of a cycle's steps is left out of the first mean, so
    what attaching, the attached share, detaching and its after-effects cost is in it; the clean steps,
    from the same cycle, follow the host's drift. Cycles with fewer than min_steps clean steps are skipped."""
    out = []
    attaches = [k for k, s in enumerate(switches) if s.attached]
    for k, nxt in zip(attaches, attaches[1:], strict=False):
        detach = next((s for s in switches[k + 1:nxt] if not s.attached), None)
        if detach is None:
            continue
        start, end = switches[k].began, switches[nxt].began
        first = bisect.bisect_right(ends, start)  # the cycle's steps: those ending inside it
        last = bisect.bisect_right(ends, end) - 1
        if first < 1 or last <= first:
            continue
        clean = [ends[i] - ends[i - 1] for i in range(first, last + 1) if ends[i - 1] >= detach.ended + clean_s]
        if len(clean) < min_steps:
            continue
        cycle_step_s = (ends[last] - ends[first - 1]) / (last - first + 1)
        out.append(cycle_step_s / statistics.fmean(clean))
    return out


def cycle_summary(costs: list[float]) -> dict:
    if not costs:
        return {"cycles": 0}
    mean, lo, hi = mean_95(costs)
    return {"cycles": len(costs), "cycle_cost_median": statistics.median(costs), "cycle_cost_mean": mean,
            "cycle_cost_mean_95": [lo, hi]}


def before_first(switches: list[Switch], ends: list[float], skip_s: float) -> dict:
    """The rate of the steps before the first switch, less the first half of that time (warming up): the
    process as it ran before any capture, to compare with the detached stretches'."""
    if not switches or not ends:
        return {}
    start = ends[0] + min(skip_s, switches[0].began - ends[0]) / 2
    first = bisect.bisect_left(ends, start)
    last = bisect.bisect_right(ends, switches[0].began) - 1
    if last - first < 3:
        return {}
    return {"before_steps_per_s": (last - first) / (ends[last] - ends[first])}


def switch_times(switches: list[Switch]) -> dict:
    """The median seconds an attach and a detach took (a detached stretch is what a window's detached
    share leaves after its detach)."""
    out = {}
    for attached, key in ((True, "attach_s_median"), (False, "detach_s_median")):
        took = [s.ended - s.began for s in switches if s.attached is attached]
        if took:
            out[key] = round(statistics.median(took), 4)
    return out


def measure_torch_profiler(name: str, args: argparse.Namespace, folder: Path) -> dict:
    """The workload toggling torch.profiler itself, its switches in the daemon log's place."""
    times = folder / f"steps-{name}.txt"
    log = folder / f"daemon-{name}.log"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
    p, pid = start_marked(name, args.python, env, extra=["--step-times", str(times), "--profiler-duty",
                                                         str(args.period), "--switches", str(log)])
    try:
        time.sleep(args.warm + args.seconds)  # the switches come and go on the loop's clock: this sets the length
    finally:
        finish(p)  # the process writes its step times and switches as it exits
    return analyse(name, folder, args, pid)


def measure(name: str, args: argparse.Namespace, folder: Path) -> dict:
    if args.torch_profiler:
        return measure_torch_profiler(name, args, folder)
    times = folder / f"steps-{name}.txt"
    log = folder / f"daemon-{name}.log"
    env = dict(os.environ)
    if args.agent:
        env["CUDA_INJECTION64_PATH"] = str(AGENT)
    config = (f"continuous_window_s = {args.period}\ncontinuous_gpu_duty = {args.duty}\ncontinuous_scan_s = 0.2\n"
              f'continuous_gpu_mode = "{args.mode}"\nstore_path = "{{tmp}}/windows.db"\n')
    if args.daemon_config:  # more settings: the bench gives the daemon its own --config, which a second one would not join
        config += Path(args.daemon_config).read_text()
    p, pid = start_marked(name, args.python, env, extra=["--step-times", str(times)])
    daemon = None
    try:
        time.sleep(args.warm)  # the loop runs on its own: this only sets how long it warms up
        daemon = Deepctx(args.deepctx.split(), args.deepctxd.split() + ["--continuous"], config, name=name,
                         log=log, level="debug")
        if PIN:
            pin_process(daemon.proc.pid, PIN["daemon"])  # threads it starts later inherit the mask
        deadline = time.monotonic() + 120
        while not daemon.capturing(pid):
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: the continuous daemon did not pick process {pid} up")
            time.sleep(0.2)  # polling the daemon's status, with a deadline
        time.sleep(args.seconds)  # the stretches come and go on the daemon's clock: this sets the run's length
    finally:
        finish(p)  # the process writes its step times as it exits
        if daemon is not None:
            daemon.stop()
    return analyse(name, folder, args, pid)


def analyse(name: str, folder: Path, args: argparse.Namespace, pid: int | None = None) -> dict:
    """The row of one workload from its step times and daemon log in folder (pid None: the process the
    duty cycle switched most often, as when reading a --keep folder again)."""
    ends = [float(x) for x in (folder / f"steps-{name}.txt").read_text().split()]
    lines = (folder / f"daemon-{name}.log").read_text().splitlines()
    if pid is None:
        seen: dict[int, int] = {}
        for line in lines:
            if SWITCHED in line:
                rec = json.loads(line)
                seen[rec["pid"]] = seen.get(rec["pid"], 0) + 1
        pid = max(seen, key=lambda k: seen[k]) if seen else 0
    switches = read_switches(lines, pid)
    seq = stretches(switches, ends, args.guard)
    row = {"workload": name, "mode": "torch.profiler" if args.torch_profiler else args.mode,
           "agent": args.agent and not args.torch_profiler, "period_s": args.period, "guard_s": args.guard,
           "steps": len(ends)} | summary(seq) | switch_times(switches) \
        | cycle_summary(cycle_costs(switches, ends, args.clean)) | before_first(switches, ends, args.warm)
    row["ratios"] = [round(r, 4) for r in pairs(seq)]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="resnet50")
    ap.add_argument("--seconds", type=float, default=120.0, help="how long each workload runs while captured")
    ap.add_argument("--period", type=float, default=2.0, help="the daemon's window: attached for its first --duty")
    ap.add_argument("--duty", type=float, default=0.5,
                    help="the share of each window attached (0.1 with --period 2 is `--gpu-duty 0.1`: read the "
                         "cycle cost; pairs need stretches longer than --guard)")
    ap.add_argument("--guard", type=float, default=0.15, help="seconds after each switch left out of its stretch")
    ap.add_argument("--clean", type=float, default=0.3,
                    help="cycle cost: steps that begin this long after a detach ended are the cycle's clean ones")
    ap.add_argument("--warm", type=float, default=5.0, help="seconds the loop runs before the daemon starts")
    ap.add_argument("--no-agent", dest="agent", action="store_false", help="the workloads run without the agent")
    ap.add_argument("--mode", choices=["sampled", "exact"], default="sampled",
                    help="GPU call paths while attached (continuous_gpu_mode): sampled, as attach's default, or exact")
    ap.add_argument("--pin", action="store_true", help="workloads on the first half of the CPUs, the daemon on the rest")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--deepctx", default="deepctx")
    ap.add_argument("--deepctxd", default="deepctxd")
    ap.add_argument("--daemon-config", metavar="TOML",
                    help="a TOML file whose settings are added to the daemon's config (e.g. a file holding "
                         "`gpu_native_continue = false`); a --config in --deepctxd would be overridden by the bench's own")
    ap.add_argument("--torch-profiler", action="store_true",
                    help="pair torch.profiler (CPU + CUDA) instead of deepctx: no daemon, no agent; the loop "
                         "switches the profiler every half --period")
    ap.add_argument("--keep", help="a folder for the step times and daemon logs (default: a temporary one)")
    ap.add_argument("--out")
    ap.add_argument("--reanalyse", metavar="FOLDER",
                    help="run nothing: pair the step times and daemon logs a --keep folder holds again")
    args = ap.parse_args()
    rows = []
    if args.reanalyse:
        for name in args.workloads.split(","):
            rows.append(analyse(name, Path(args.reanalyse), args))
            print(json.dumps(rows[-1]), flush=True)
    else:
        exit_on_sigterm()
        if args.pin:
            pin_halves()
        folder = Path(args.keep or tempfile.mkdtemp(prefix="deepctx-duty-"))
        folder.mkdir(parents=True, exist_ok=True)
        for name in args.workloads.split(","):
            rows.append(measure(name, args, folder))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'workload':14} {'mode':14} {'pairs':>5} {'before':>8} {'steps/s off':>11} {'on':>8} {'median':>7} "
          f"{'mean':>7} {'95% of the mean':>17} {'pooled':>7}   median steps: {'median':>7} {'mean':>7} "
          f"{'95% of the mean':>17}")
    for r in rows:
        lo, hi = r.get("ratio_mean_95", [math.nan, math.nan])
        mlo, mhi = r.get("median_step_ratio_mean_95", [math.nan, math.nan])
        print(f"{r['workload']:14} {r['mode']:14} {r['pairs']:5d} {r.get('before_steps_per_s', math.nan):8.2f} "
              f"{r.get('off_steps_per_s', math.nan):11.2f} "
              f"{r.get('on_steps_per_s', math.nan):8.2f} {r.get('ratio_median', math.nan):7.4f} "
              f"{r.get('ratio_mean', math.nan):7.4f} {lo:8.4f}-{hi:.4f} {r.get('pooled_ratio', math.nan):7.4f}   "
              f"{'':14}{r.get('median_step_ratio_median', math.nan):7.4f} "
              f"{r.get('median_step_ratio_mean', math.nan):7.4f} {mlo:8.4f}-{mhi:.4f}")
    print(f"\n{'workload':14} {'cycles':>6} {'cycle cost median':>17} {'mean':>7} {'95% of the mean':>17}")
    for r in rows:
        lo, hi = r.get("cycle_cost_mean_95", [math.nan, math.nan])
        print(f"{r['workload']:14} {r['cycles']:6d} {r.get('cycle_cost_median', math.nan):17.4f} "
              f"{r.get('cycle_cost_mean', math.nan):7.4f} {lo:8.4f}-{hi:.4f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
