"""What a capture's uprobes cost a process it does not profile that maps the same library (another rank of
the job, another job from the same environment), with the probes set for every process (pid 0, as the GPU
API probes were before) against for the profiled process alone (as they are now), side by side in one run.

    sudo python3 bench/bystander_traps.py [--calls 200000] [--rounds 5]

This process stands for the profiled one and probes libc's labs() with a BPF program that returns at once
(as the GPU API entry program does for a process it does not profile). A child process, the bystander, calls
labs() --calls times through ctypes and reports the time per call. Each round measures the bystander with
no probe, with the probe for every process, and with the probe for this process alone, in a shuffled order.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

from deepctx.probes.uprobes import UprobeAttacher

sys.path.insert(0, str(Path(__file__).resolve().parent))
from libc_sites import function_offsets, libc_path  # noqa: E402

BYSTANDER = """
import ctypes, ctypes.util, sys, time
labs = ctypes.CDLL(ctypes.util.find_library("c")).labs
n = int(sys.argv[1])
for _ in range(1000):
    labs(-1)
t0 = time.perf_counter()
for _ in range(n):
    labs(-1)
print((time.perf_counter() - t0) / n * 1e9)
"""


def bystander_ns(calls: int) -> float:
    out = subprocess.run([sys.executable, "-c", BYSTANDER, str(calls)], check=True, capture_output=True, text=True)
    return float(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from bcc import BPF

    bpf = BPF(text=b"int on_call(void *ctx) { return 0; }")
    path = libc_path()
    offset = function_offsets(path, ("labs",))["labs"]
    ways = {"no probe": None, "probe for every process": 0, "probe for the profiled process": os.getpid()}
    ns: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(args.rounds):
        order = list(ways)
        random.shuffle(order)
        for way in order:
            pid = ways[way]
            attacher = None
            if pid is not None:
                attacher = UprobeAttacher(bpf, "on_call", "on_call", pid=pid)
                attacher.attach(path, [offset], with_return=False)
            try:
                ns[way].append(bystander_ns(args.calls))
            finally:
                if attacher is not None:
                    attacher.close()
    print(f"a bystander's labs() call through ctypes, {args.calls} calls, {args.rounds} rounds, "
          f"kernel {os.uname().release}")
    base = statistics.median(ns["no probe"])
    for way, xs in ns.items():
        m = statistics.median(xs)
        print(f"  {way:32} median {m:7.1f} ns a call (min {min(xs):.1f}, max {max(xs):.1f})  {m / base:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
