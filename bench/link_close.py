"""How long detaching a capture's uprobe_multi links takes, closed one after another against all together
(probes/uprobes.close_links), side by side in one run on this kernel.

    sudo python3 bench/link_close.py [--links 8] [--offsets 40] [--rounds 5]

Each round makes --links links of --offsets libc functions each (this process only), then closes them one
by one; and again, closing them with close_links. Every link's release waits for an RCU grace period, which
is what a continuous capture's duty cycle and every capture's end wait for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from deepctx.probes.uprobes import BPF_TRACE_UPROBE_MULTI, close_links, link_uprobe_multi

sys.path.insert(0, str(Path(__file__).resolve().parent))
from libc_sites import function_offsets, libc_path  # noqa: E402


def function_offsets_of(path: str, limit: int) -> list[int]:
    return sorted(set(function_offsets(path).values()))[:limit]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--links", type=int, default=8)
    ap.add_argument("--offsets", type=int, default=40, help="probed functions per link")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lib", default=None, help="default: the libc this process loaded")
    args = ap.parse_args()
    from bcc import BPF

    bpf = BPF(text=b"int on_call(void *ctx) { return 0; }")
    fd = bpf.load_func(b"on_call", BPF.KPROBE, attach_type=BPF_TRACE_UPROBE_MULTI).fd
    args.lib = args.lib or libc_path()
    offs = function_offsets_of(args.lib, args.links * args.offsets)
    chunks = [offs[i::args.links] for i in range(args.links)]
    times: dict[str, list[float]] = {"one by one": [], "together": []}
    for _ in range(args.rounds):
        for way in times:
            links = [link_uprobe_multi(fd, args.lib, c, retprobe=False, pid=os.getpid()) for c in chunks]
            t0 = time.monotonic()
            if way == "one by one":
                for link in links:
                    os.close(link)
            else:
                close_links(links)
            times[way].append(time.monotonic() - t0)
    print(f"{args.links} links of {args.offsets} uprobes each, {args.rounds} rounds, kernel {os.uname().release}")
    for way, ts in times.items():
        print(f"  {way:10}  median {statistics.median(ts) * 1e3:7.1f} ms  (min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f})")
    ratio = statistics.median(times["one by one"]) / statistics.median(times["together"])
    print(f"  together is {ratio:.1f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
