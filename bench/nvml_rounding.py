"""Whether NVML's utilization samples truncate or round their percent: daemon/busy_meter.py takes them as
unbiased, and a truncating driver would make `--gpu-duty`'s scaled device times run high by about
0.5 / busy% (the tests' mock NVML rounds: tests/mocks/mock_nvml.c).

    python3 bench/nvml_rounding.py [--duties 0.157,0.357,0.557] [--seconds 6] [--periods-ms 1,10]

For each duty, one kernel of duty x period (torch.cuda._sleep, calibrated first on a 1 s kernel) is
launched each period and the CPU spins to the next period. The busy share over the span NVML's samples
cover comes two ways: from CUDA events around every kernel (`truth_events_pct`: each span includes the
events' own few microseconds), and from the calibrated duration, placed to end at each kernel's end event
(`truth_pct`); NVML's samples of GPU 0 give theirs. With duties whose
percent ends in .7, truncation reads about 0.7 below the truth and rounding about 0.3 above it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

import torch

from deepctx.daemon.nvml import Nvml


def calibrate() -> float:
    """_sleep cycles per millisecond of device time."""
    cycles = 2_000_000_000  # about a second: the events' own microseconds do not count
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # warm up
    a.record()
    torch.cuda._sleep(cycles)
    b.record()
    torch.cuda.synchronize()
    return cycles / a.elapsed_time(b)


def run(dev, duty: float, seconds: float, period_s: float, per_ms: float) -> dict:
    cycles = int(duty * period_s * 1e3 * per_ms)
    torch.cuda.synchronize()
    ref = torch.cuda.Event(enable_timing=True)
    ref.record()
    torch.cuda.synchronize()
    wall0 = time.time()  # ref's instant on the wall clock (NVML stamps its samples on it), within microseconds
    since = int(wall0 * 1e6)
    events = []
    t = time.perf_counter()
    end = t + seconds
    while t < end:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        events.append((a, b))
        t += period_s
        while time.perf_counter() < t:  # spin: a sleep's wake-up jitter would blur the duty
            pass
    torch.cuda.synchronize()
    kernels = [(wall0 + ref.elapsed_time(a) / 1e3, wall0 + ref.elapsed_time(b) / 1e3) for a, b in events]
    samples = dev.utilization_samples(since)
    # the samples whose whole period lies in the run: each covers the time since the sample before it
    inside = [(prev[0] / 1e6, cur[0] / 1e6, cur[1]) for prev, cur in zip(samples, samples[1:], strict=False)
              if prev[0] / 1e6 >= kernels[0][0] + 0.2 and cur[0] / 1e6 <= kernels[-1][1]]
    if not inside:
        return {"duty": duty, "error": f"no NVML sample period inside the run ({len(samples)} samples)"}
    lo, hi = inside[0][0], inside[-1][1]
    busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in kernels)
    dur = cycles / per_ms / 1e3
    busy_cal = sum(max(0.0, min(e, hi) - max(e - dur, lo)) for _, e in kernels)
    truth = 100 * busy_cal / (hi - lo)
    nvml = sum(v * (e - s) for s, e, v in inside) / (hi - lo)
    per_sample_truth = [100 * sum(max(0.0, min(ke, e) - max(ke - dur, s)) for _, ke in kernels) / (e - s)
                        for s, e, _ in inside]
    diffs = [v - t for (_, _, v), t in zip(inside, per_sample_truth, strict=True)]
    return {"duty": duty, "period_ms": period_s * 1e3, "truth_pct": round(truth, 3),
            "truth_events_pct": round(100 * busy / (hi - lo), 3), "nvml_pct": round(nvml, 3),
            "nvml_minus_truth": round(nvml - truth, 3), "samples": len(inside),
            "sample_period_ms": round(1e3 * (hi - lo) / len(inside), 1),
            "per_sample_diff_mean": round(sum(diffs) / len(diffs), 3),
            "values": Counter(v for _, _, v in inside).most_common(4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duties", default="0.157,0.357,0.557")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--periods-ms", default="1,10", help="kernel periods, comma-separated")
    args = ap.parse_args()
    dev = Nvml().devices()[0]
    per_ms = calibrate()
    print(json.dumps({"sleep_cycles_per_ms": round(per_ms)}), flush=True)
    for period in (float(x) for x in args.periods_ms.split(",")):
        for duty in (float(x) for x in args.duties.split(",")):
            print(json.dumps(run(dev, duty, args.seconds, period / 1e3, per_ms)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
