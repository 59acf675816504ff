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
import ctypes as ct
import ctypes.util
import os
import random
import statistics
import subprocess
import sys

from elftools.elf.elffile import ELFFile

from deepctx.probes.uprobes import UprobeAttacher

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


def labs_offset() -> tuple[str, int]:
    class DlInfo(ct.Structure):
        _fields_ = [("fname", ct.c_char_p), ("fbase", ct.c_void_p), ("sname", ct.c_char_p), ("saddr", ct.c_void_p)]

    libc = ct.CDLL(ctypes.util.find_library("c"))
    info = DlInfo()
    dladdr = ct.CDLL(None).dladdr
    dladdr.argtypes = [ct.c_void_p, ct.POINTER(DlInfo)]
    dladdr(ct.cast(libc.labs, ct.c_void_p), ct.byref(info))
    path = os.path.realpath(info.fname.decode())
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sym = next(s for s in elf.get_section_by_name(".dynsym").iter_symbols() if s.name == "labs")
        seg = next(s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
                   and s["p_vaddr"] <= sym["st_value"] < s["p_vaddr"] + s["p_memsz"])
    return path, sym["st_value"] - seg["p_vaddr"] + seg["p_offset"]


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
    path, offset = labs_offset()
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
