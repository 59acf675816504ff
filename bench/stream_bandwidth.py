"""What a streaming copy reaches of the GPU memory's peak bandwidth (NVML's: bus width times the highest memory
clock, two transfers a clock, as deepctx reads it: daemon/nvml.py), the fastest a kernel moves bytes in
practice; the analyzer's compiled-hot-kernel rule puts a kernel's memory floor there (STREAM_SHARE).

    python3 bench/stream_bandwidth.py [--gib 1] [--reps 20] [--rounds 5]

Each round times --reps device-to-device copies of a --gib GiB tensor (read once, written once) with CUDA
events, and also --reps launches of an elementwise kernel over it (x * 1.5 into another tensor); it
prints each round's GB/s and share of the peak, and their medians. No deepctx."""

from __future__ import annotations

import argparse
import json
import statistics

import torch


def peak_bandwidth() -> tuple[str | None, float | None]:
    """NVML's peak bytes a second of GPU 0, as the daemon computes it."""
    from deepctx.daemon.nvml import Nvml

    nvml = Nvml()
    try:
        dev = nvml.devices()[0]
        return dev.name(), dev.memory_bandwidth()
    finally:
        nvml.close()


def timed(fn, reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    name, peak = peak_bandwidth()
    n = int(args.gib * (1 << 30)) // 4
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    moved = 2 * n * 4
    rows: dict[str, list[float]] = {"copy": [], "elementwise": []}
    timed(lambda: dst.copy_(src), 3)
    for _ in range(args.rounds):
        rows["copy"].append(moved / timed(lambda: dst.copy_(src), args.reps))
        rows["elementwise"].append(moved / timed(lambda: torch.mul(src, 1.5, out=dst), args.reps))
    out = {"device": name, "peak_gb_s": peak / 1e9 if peak else None}
    for k, v in rows.items():
        med = statistics.median(v)
        out[k] = {"gb_s": [round(x / 1e9, 1) for x in v], "median_gb_s": round(med / 1e9, 1),
                  "share_of_peak": round(med / peak, 3) if peak else None}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
