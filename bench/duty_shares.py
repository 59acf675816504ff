"""Each attached share of the --gpu-duty captures in a `bench/gpu_duty_scaling.sh` run, and the GPU rate it
recorded against the full captures'.

    python3 bench/duty_shares.py OVERHEAD_TXT DAEMON_LOG [--steps STEP_TIMES] [--nvml NVML_JSONL]

OVERHEAD_TXT: gpu_overhead.py's output (its JSON rows); DAEMON_LOG: the daemon's log at debug level
(--daemon-log DIR --daemon-log-level debug: DIR/daemon-default.log), whose "device share" lines
daemon/device_share.py writes. The captures are matched to the rows in order. Per share: records, their own
time, stale records (work begun before the share), the instants from the share's attach (agent active,
first record's start, last record's end, flush, detach) and the density (device time over first record to
flush). Per capture: each interval's density and the GPU time per step it gives at the block's step rate,
next to the profile's.

--steps (gpu_overhead.py's DIR/steps-NAME.txt: every step's end, monotonic): the steps inside each capture
and inside its shares (from the first record to the flush), so the GPU time per step the shares recorded,
which does not depend on how fast the job ran while recorded, and the job's step rate inside the shares
against the capture's. --nvml (bench/nvml_trace.py's samples): the GPU's busy time by NVML over each
capture and over its shares, and the GPU time per step two estimators give: the recorded device time scaled
by NVML's busy time over the capture against over the shares, and NVML's busy time over the capture alone.
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from pathlib import Path

INTERVALS = ("first_record_to_flush", "span", "active_to_flush")


def captures(log: Path) -> list[list[dict]]:
    """The "device share" lines of each capture, in the order the captures finished."""
    out: list[list[dict]] = []
    cur: list[dict] | None = None
    for line in log.read_text().splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        msg = d.get("msg")
        if msg == "capture started":
            cur = []
        elif msg == "device share" and cur is not None:
            cur.append(d)
        elif msg == "capture finished" and cur is not None:
            out.append(cur)
            cur = None
    return out


def at(share: dict, name: str) -> str:
    v = share.get(f"{name}_at_s")
    return "-" if v is None else f"{v:7.3f}"


class Steps:
    """Steps done by an instant (monotonic s), interpolated between the steps' ends."""

    def __init__(self, ends: list[float]) -> None:
        self.ends = sorted(ends)

    def at(self, t: float) -> float:
        i = bisect.bisect_right(self.ends, t)
        if i == 0 or i == len(self.ends):
            return float(i)
        a, b = self.ends[i - 1], self.ends[i]
        return i + (t - a) / (b - a) if b > a else float(i)

    def between(self, t0: float, t1: float) -> float:
        return self.at(t1) - self.at(t0)


class Busy:
    """NVML's device utilization samples as busy seconds over an interval (monotonic s): each sample is the
    busy percent of the period since the one before it."""

    def __init__(self, lines: list[dict]) -> None:
        anchors = [d["anchor"] for d in lines if "anchor" in d]
        self.offset = anchors[0]["realtime"] - anchors[0]["mono"] if anchors else 0.0
        samples = sorted({(t, v) for d in lines for t, v in d.get("gpu", [])})
        self.periods = [((a[0] / 1e6) - self.offset, (b[0] / 1e6) - self.offset, b[1] / 100)
                        for a, b in zip(samples, samples[1:], strict=False)]
        self.errors = [d["error"] for d in lines if "error" in d]

    def between(self, t0: float, t1: float) -> tuple[float, float]:
        """(busy seconds, seconds covered by samples) in [t0, t1]."""
        busy = covered = 0.0
        for a, b, u in self.periods:
            o = min(b, t1) - max(a, t0)
            if o > 0:
                busy += u * o
                covered += o
        return busy, covered


def share_interval(s: dict) -> tuple[float, float] | None:
    """A share's recorded interval (first record to flush), monotonic, from its debug line."""
    if "attached_mono" not in s or "first_start_at_s" not in s:
        return None
    return s["attached_mono"] + s["first_start_at_s"], s["attached_mono"] + s["flush_at_s"]


def report_steps(r: dict, shares: list[dict], steps: Steps | None, busy: Busy | None) -> None:
    if "stopped_mono" not in r or not r.get("duration_s"):
        return
    c0, c1 = r["stopped_mono"] - r["duration_s"], r["stopped_mono"]
    ivs = [iv for iv in map(share_interval, shares) if iv is not None]
    device_ms = sum(s.get("device_ms", 0.0) for s in shares if share_interval(s) is not None)
    full_ms = r.get("device_time_ns", 0) / 1e6
    if steps is not None:
        n = steps.between(c0, c1)
        print(f"  capture: {n:.1f} steps in {c1 - c0:.2f} s ({n / (c1 - c0):.2f} steps/s)", end="")
        if not shares and n:
            print(f", {full_ms / n:.2f} recorded GPU ms/step, {r.get('device_records', 0) / n:.0f} records/step")
        else:
            sn = sum(steps.between(a, b) for a, b in ivs)
            st = sum(b - a for a, b in ivs)
            print(f"; shares: {sn:.1f} steps in {st:.3f} s ({sn / st if st else 0:.2f} steps/s), "
                  f"{device_ms / sn if sn else 0:.2f} recorded GPU ms/step, "
                  f"{sum(x['records'] for x in shares if share_interval(x)) / sn if sn else 0:.0f} records/step")
    if busy is not None and busy.periods:
        b_cap, cov = busy.between(c0, c1)
        per_step = r.get("steps_per_s")  # the block's rate, for when no step times came back
        n = steps.between(c0, c1) if steps is not None else per_step * (c1 - c0)
        line = f"  NVML: busy {b_cap:.3f} s of {cov:.2f} s covered, {1000 * b_cap / n:.2f} busy ms/step"
        if shares:
            b_sh = sum(busy.between(a, b)[0] for a, b in ivs)
            if b_sh:
                line += f"; scaled by busy capture/shares ({b_cap:.3f}/{b_sh:.3f}): {device_ms * b_cap / b_sh / n:.2f} GPU ms/step"
        elif n:
            line += f"; recorded {full_ms / n:.2f} GPU ms/step"
        print(line)


def report(rows: list[dict], caps: list[list[dict]], steps: Steps | None = None, busy: Busy | None = None) -> None:
    on = [r for r in rows if r["variant"] != "alone"]
    print(f"{len(on)} captures in the rows, {len(caps)} in the log")
    for r, shares in zip(on, caps, strict=False):  # a run cut short: fewer in the log
        per_step = r.get("profile_gpu_ms_per_step")
        print(f"\n{r['variant']} (block {r['block']}): {r['steps_per_s']:.2f} steps/s, profile "
              f"{per_step:.2f} GPU ms/step" if per_step else f"\n{r['variant']} (block {r['block']})")
        sums = dict.fromkeys(INTERVALS, 0.0)
        device_ms = 0.0
        for s in shares:
            first = s.get("first_record_to_flush_s", 0.0)
            print(f"  {s['records']:6d} records {s.get('device_ms', 0):7.1f} ms, stale {s.get('stale', 0)} "
                  f"({s.get('stale_ms', 0):.1f} ms) | active {at(s, 'active')} first {at(s, 'first_start')} "
                  f"last {at(s, 'last_end')} flush {at(s, 'flush')} detached {at(s, 'detached')} | density "
                  f"{s.get('device_ms', 0) / 1000 / first if first else 0:.3f}")
            device_ms += s.get("device_ms", 0)
            for k in INTERVALS:
                sums[k] += s.get(f"{k}_s", 0.0)
        for k in INTERVALS:
            if sums[k]:
                density = device_ms / 1000 / sums[k]
                print(f"  {k}: density {density:.3f}, {1000 * density / r['steps_per_s']:.2f} GPU ms/step")
        if not shares and r.get("device_time_in_profile_ns") and per_step:
            seconds = r["device_time_in_profile_ns"] / 1e6 / per_step / r["steps_per_s"]
            print(f"  full capture: density {r['device_time_ns'] / 1e9 / seconds:.3f}")
        report_steps(r, shares, steps, busy)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overhead", type=Path, help="gpu_overhead.py's output")
    ap.add_argument("daemon_log", type=Path, help="the daemon's log at debug level")
    ap.add_argument("--steps", type=Path, help="the workload's step ends (gpu_overhead.py's DIR/steps-NAME.txt)")
    ap.add_argument("--nvml", type=Path, help="bench/nvml_trace.py's samples")
    args = ap.parse_args()
    rows = [json.loads(line) for line in args.overhead.read_text().splitlines() if line.startswith("{")]
    steps = Steps([float(x) for x in args.steps.read_text().split()]) if args.steps else None
    busy = None
    if args.nvml:
        busy = Busy([json.loads(line) for line in args.nvml.read_text().splitlines() if line.strip()])
        for e in busy.errors:
            print(f"NVML: {e}")
    report(rows, captures(args.daemon_log), steps, busy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
