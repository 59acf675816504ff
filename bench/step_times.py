"""Each step's time, and when (CLOCK_MONOTONIC), of one workload running for SECONDS: to line up slow steps
with what a profiler does meanwhile (e.g. the agent's DEEPCTX_AGENT_TIMING=1 lines, which carry the same
clock). Used for the continuous-mode duty-cycle figures in BENCHMARKS.md.

    python3 bench/step_times.py resnet50 35
"""

from __future__ import annotations

import argparse
import sys
import time

from workloads import WORKLOADS


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=sorted(WORKLOADS))
    ap.add_argument("seconds", type=float)
    ap.add_argument("--slowest", type=int, default=12, help="how many of the slowest steps to list")
    args = ap.parse_args()
    step = WORKLOADS[args.name]()
    for _ in range(5):
        step()
    print("ready", flush=True)
    end = time.monotonic() + args.seconds
    times: list[tuple[float, float]] = []
    while time.monotonic() < end:
        t = time.monotonic()
        step()
        times.append((t, time.monotonic() - t))
    d = sorted(dt for _, dt in times)
    print(f"steps {len(d)} p50 {1000 * d[len(d) // 2]:.1f} ms p90 {1000 * d[int(len(d) * 0.9)]:.1f} "
          f"max {1000 * d[-1]:.1f}")
    for t, dt in sorted(times, key=lambda x: -x[1])[:args.slowest]:
        print(f"slow step at {t:.3f} s: {1000 * dt:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
