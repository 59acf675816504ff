"""GPM's graphics activity of one GPU at a fine period while a bench runs, as JSON lines, to judge busy-time
scaling of `--gpu-duty` captures offline (bench/duty_shares.py --gpm) against what the shares recorded.

    python3 bench/gpm_trace.py OUT.jsonl [--period 0.02] [--device 0]     (runs until SIGTERM or SIGINT)

Lines: {"info": {...}} first (the device's UUID, GPM support, MIG mode), {"gpm": [[mono_from, mono_to,
busy, read_ms], ...]} about once a second (busy: the share of the time between two samples the GPU ran
work; the instants: CLOCK_MONOTONIC s as each sample's read returned; read_ms: how long that read took), {"pids": [...]} with them (the compute processes),
{"error": text}.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from deepctx.daemon.nvml import GpmSample, Nvml, NvmlError, graphics_util


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--period", type=float, default=0.02, help="seconds between samples")
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with args.out.open("w") as f:
        try:
            nvml = Nvml()
            dev = nvml.devices()[args.device]
            f.write(json.dumps({"info": {"uuid": dev.uuid(), "gpm": dev.gpm_supported(), "mig": dev.mig_enabled(),
                                         "pids": sorted(dev.compute_pids())}}) + "\n")
            prev, prev_at = GpmSample(dev), time.monotonic()
        except (NvmlError, IndexError) as e:
            f.write(json.dumps({"error": str(e)}) + "\n")
            return 1
        rows: list[list[float]] = []
        flushed = time.monotonic()
        while not stop:
            time.sleep(args.period)  # a sampling period, not synchronization
            try:
                t0 = time.monotonic()
                cur = GpmSample(dev)
                at = time.monotonic()
                busy = graphics_util(prev, cur)
                rows.append([round(prev_at, 6), round(at, 6), round(busy, 5), round(1000 * (at - t0), 3)])
            except NvmlError as e:
                f.write(json.dumps({"error": str(e)}) + "\n")
                return 1
            prev.close()
            prev, prev_at = cur, at
            if at - flushed >= 1.0:
                f.write(json.dumps({"gpm": rows}) + "\n" + json.dumps({"pids": sorted(dev.compute_pids())}) + "\n")
                f.flush()
                rows, flushed = [], at
        if rows:
            f.write(json.dumps({"gpm": rows}) + "\n")
        prev.close()
        nvml.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
