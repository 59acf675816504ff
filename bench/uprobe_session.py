"""What the traps of a probed call cost, and whether an uprobe session skips the return's (issue #31).

    sudo .venv/bin/python bench/uprobe_session.py [--seconds 3] [--rounds 2] [--libcudart PATH]

A CPython process calls cudaLaunchKernel of the real CUDA runtime (pip's nvidia-cuda-runtime; without a GPU
each call fails inside the runtime, the probes fire as on a GPU host) in a loop and reports its call rate
twice a second. In turn, with the call left alone before and after each, this attaches programs that return
at once:
  entry only          a uprobe_multi link at the function's entry (what sampled mode pays);
  entry + return      uprobe_multi links at entry and return (a bare entry+return uprobe: the CI budget's floor);
  session, keep       an uprobe session link (Linux 6.13+) whose entry returns 0: the return runs too;
  session, skip       the same link, the entry returning 1: the kernel leaves the return alone.
Printed: ns each adds to a call (1/rate on - 1/rate alone, the alone rate the mean of the neighbours).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from deepctx.host.elf.image import ElfImage
from deepctx.probes.uprobes import BPF_TRACE_UPROBE_MULTI, BPF_TRACE_UPROBE_SESSION, link_uprobe_multi
from deepctx.probes.usdt import vaddr_to_offset

LOOP = r"""
import ctypes, sys, time
launch = ctypes.CDLL(sys.argv[1]).cudaLaunchKernel
launch.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32,
                   ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
grid, one = ctypes.c_uint64(1 | (1 << 32)), ctypes.c_uint32(1)
print("ready", flush=True)
n, t0 = 0, time.perf_counter()
while True:
    for _ in range(1000):
        launch(None, grid, one, grid, one, None, 0, None)
    n += 1000
    t = time.perf_counter()
    if t - t0 >= 0.5:
        print(n / (t - t0), flush=True)
        n, t0 = 0, t
"""

PROGRAMS = b"""
int entry(void *ctx) { return 0; }
int ret(void *ctx) { return 0; }
int keep(void *ctx) { return 0; }
int skip(void *ctx) { return 1; }
"""


def libcudart() -> str:
    import nvidia

    for base in nvidia.__path__:
        for lib in sorted(Path(base).glob("cu*/lib/libcudart.so.*")):
            return str(lib)
    raise SystemExit("no libcudart: install pip's nvidia-cuda-runtime or pass --libcudart")


def file_offset(path: str, symbol: str) -> int:
    """Where a symbol's code sits in its file (what a uprobe link takes)."""
    with ElfImage(path) as elf:
        found = elf.symbol(symbol)
        off = vaddr_to_offset([(seg.offset, seg.vaddr, seg.filesz) for seg in elf.segments], found[0]) if found else None
    if off is None:
        raise SystemExit(f"{symbol} is not in a loaded segment of {path}")
    return off


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds each rate is read over")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--libcudart")
    args = ap.parse_args()
    from bcc import BPF

    lib = args.libcudart or libcudart()
    offset = file_offset(lib, "cudaLaunchKernel")
    target = subprocess.Popen([sys.executable, "-c", LOOP, lib], stdout=subprocess.PIPE, text=True)
    assert target.stdout is not None
    assert target.stdout.readline().strip() == "ready"
    bpf = BPF(text=PROGRAMS)

    def link(fn: str, attach_type: int, retprobe: bool = False) -> int:
        prog = bpf.load_func(fn.encode(), BPF.KPROBE, attach_type=attach_type).fd
        return link_uprobe_multi(prog, lib, [offset], retprobe, pid=target.pid, attach_type=attach_type)

    def rate() -> float:
        assert target.stdout is not None
        target.stdout.readline()  # a report that may span the switch
        end, seen = time.monotonic() + args.seconds, []
        while time.monotonic() < end:
            seen.append(float(target.stdout.readline()))
        return statistics.median(seen)

    variants = {
        "entry only": lambda: [link("entry", BPF_TRACE_UPROBE_MULTI)],
        "entry + return": lambda: [link("entry", BPF_TRACE_UPROBE_MULTI),
                                   link("ret", BPF_TRACE_UPROBE_MULTI, retprobe=True)],
        "session, keep the return": lambda: [link("keep", BPF_TRACE_UPROBE_SESSION)],
        "session, skip the return": lambda: [link("skip", BPF_TRACE_UPROBE_SESSION)],
    }
    added: dict[str, list[float]] = {}
    try:
        for _ in range(args.rounds):
            for name, attach in variants.items():
                before = rate()
                fds = attach()
                on = rate()
                for fd in fds:
                    os.close(fd)
                alone = (before + rate()) / 2
                added.setdefault(name, []).append(1e9 * (1 / on - 1 / alone))
                print(f"{name:26} alone {alone / 1e6:5.2f} M calls/s, probed {on / 1e6:5.2f} M/s: "
                      f"+{added[name][-1]:.0f} ns a call", flush=True)
    finally:
        target.kill()
        target.wait()
    print(f"\n# {os.cpu_count()} CPUs, kernel {os.uname().release}, {lib}")
    for name, ns in added.items():
        print(f"{name:26} median +{statistics.median(ns):5.0f} ns a call ({', '.join(f'{v:.0f}' for v in ns)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
