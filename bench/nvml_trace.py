"""NVML's utilization samples of GPU 0 while a bench runs: the device's (percent of each sample period in
which a kernel ran) and each process's (SM percent), as JSON lines, to judge a busy-time measure that
recording does not disturb against what `--gpu-duty` captures record (bench/duty_shares.py --nvml).

    python3 bench/nvml_trace.py OUT.jsonl [--poll 0.5] [--device 0]     (runs until SIGTERM or SIGINT)

Lines: {"anchor": {"realtime": s, "mono": s}} at the start and the end (NVML stamps its samples on the
wall clock in microseconds; the bench's instants are monotonic), {"gpu": [[ts_us, value], ...]} and
{"proc": [[pid, ts_us, sm, mem], ...]} per poll (the samples newer than the last seen), {"error": text}.
"""

from __future__ import annotations

import argparse
import ctypes as ct
import json
import signal
import sys
import time
from pathlib import Path
from typing import IO

from deepctx.daemon.nvml import ERROR_INSUFFICIENT_SIZE, Nvml, NvmlError


class ProcSample(ct.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", ct.c_uint), ("ts_us", ct.c_ulonglong), ("sm", ct.c_uint), ("mem", ct.c_uint),
                ("enc", ct.c_uint), ("dec", ct.c_uint)]


class Trace:
    """One GPU's samples newer than the last read (daemon/nvml.py's binding; the per-process ones here)."""

    def __init__(self, index: int) -> None:
        self.dev = Nvml().devices()[index]
        self.gpu_seen = 0
        self.proc_seen = 0

    def gpu(self) -> list[list[int]]:
        out = [[t, v] for t, v in self.dev.utilization_samples(self.gpu_seen)]
        if out:
            self.gpu_seen = out[-1][0]
        return out

    def procs(self) -> list[list[int]]:
        lib, n = self.dev.nvml.lib, ct.c_uint(0)
        rc = lib.nvmlDeviceGetProcessUtilization(self.dev.handle, None, ct.byref(n), ct.c_ulonglong(self.proc_seen))
        if rc not in (0, ERROR_INSUFFICIENT_SIZE) or not n.value:
            return []
        buf = (ProcSample * n.value)()
        rc = lib.nvmlDeviceGetProcessUtilization(self.dev.handle, buf, ct.byref(n), ct.c_ulonglong(self.proc_seen))
        if rc != 0:
            return []
        out = [[s.pid, s.ts_us, s.sm, s.mem] for s in buf[:n.value] if s.ts_us > self.proc_seen]
        if out:
            self.proc_seen = max(r[1] for r in out)
        return out


def anchor(f: IO[str]) -> None:
    f.write(json.dumps({"anchor": {"realtime": time.time(), "mono": time.monotonic()}}) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between reads of NVML's sample buffer")
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    out, poll, index = args.out, args.poll, args.device
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with out.open("w") as f:
        anchor(f)
        try:
            nvml = Trace(index)
        except (NvmlError, IndexError) as e:
            f.write(json.dumps({"error": str(e)}) + "\n")
            return 1
        while not stop:
            for key, rows in (("gpu", nvml.gpu()), ("proc", nvml.procs())):
                if rows:
                    f.write(json.dumps({key: rows}) + "\n")
            f.flush()
            time.sleep(poll)  # a polling period, not synchronization: NVML keeps a buffer of samples
        anchor(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
