"""CUPTI's own cost on a workload, without deepctx: the floor under any way of joining its records.

    python3 bench/cupti_floor.py [--workloads launch_bound,resnet50,gpt2] [--rounds 6] [--block 1.0]
        [--configs off,kernel,records,...] [--out floor.json]

One process per workload (bench/workloads.py's steps, run in this process), with bench/cupti_floor.c
compiled against CUPTI's headers and linked to the libcupti that PyTorch ships. Every round visits each
configuration once, in a shuffled order, and times a block of steps (about --block seconds) after a
settling step; a configuration's ratio in a round is the mean step rate of that round's "off" blocks over
its own. Reported per configuration: the median and spread of those ratios over the rounds, and the
callbacks and activity records per step. Set FLOOR_TSCB=0 to leave CUPTI on its own clock (the deepctx
agent gives CUPTI its clock through the timestamp callback by default). Set FLOOR_FINALIZE=1 to release
CUPTI (cuptiFinalize) after every block that turned part of it on, as the agent does at a stop with
DEEPCTX_CUPTI_FINALIZE=1: without it the "off" blocks run with CUPTI initialized, which slows every CUDA call
(the H100 host's launch-bound loop: 17 to 23%), so every ratio is understated.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from workloads import WORKLOADS  # noqa: E402

KERNEL, COPY, SYNC, CB_RUNTIME, CB_DRIVER, API_RUNTIME, API_DRIVER = 1, 2, 4, 8, 16, 32, 64
RECORDS = KERNEL | COPY | SYNC  # the deepctx agent's record kinds
CONFIGS = {
    "off": 0,
    "kernel": KERNEL,
    "kernel+copy": KERNEL | COPY,  # which of the other record kinds costs what
    "kernel+sync": KERNEL | SYNC,
    "records": RECORDS,
    "records+cb_runtime": RECORDS | CB_RUNTIME,
    "records+cb_driver": RECORDS | CB_DRIVER,
    "records+cb_both": RECORDS | CB_RUNTIME | CB_DRIVER,  # what the deepctx agent enables
    "records+api_runtime": RECORDS | API_RUNTIME,
    "records+api_driver": RECORDS | API_DRIVER,
    "cb_both": CB_RUNTIME | CB_DRIVER,
}
SETTLE = {"launch_bound": 20, "launch_backward": 10, "resnet50": 2, "gpt2": 1, "jax": 20}


def libcupti() -> Path:
    import nvidia  # the pip wheels PyTorch depends on (nvidia/cu13/lib/libcupti.so.13)

    for base in nvidia.__path__:
        for hit in sorted(glob.glob(os.path.join(base, "*", "lib", "libcupti.so*")), reverse=True):
            return Path(hit)
    raise SystemExit("no libcupti in the nvidia wheels")


def build(out: Path) -> ctypes.CDLL:
    inc = subprocess.run([str(HERE.parent / "native" / "cuda_include.sh"), "cupti.h", sys.executable],
                         capture_output=True, text=True, check=True).stdout.strip()
    cuda = subprocess.run([str(HERE.parent / "native" / "cuda_include.sh"), "cuda.h", sys.executable],
                          capture_output=True, text=True, check=True).stdout.strip()
    if not inc:
        raise SystemExit("CUPTI headers not found (native/cuda_include.sh)")
    lib = libcupti()
    so = out / "cupti_floor.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-Wall", "-Werror", f"-I{inc}", f"-I{cuda}",
                    f"-I{HERE.parent / 'native'}",
                    str(HERE / "cupti_floor.c"), "-o", str(so), str(lib), f"-Wl,-rpath,{lib.parent}", "-lpthread"],
                   check=True)
    dll = ctypes.CDLL(str(so))
    dll.floor_set.argtypes = [ctypes.c_uint]
    dll.floor_counts.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    return dll


def steps_for(step, seconds: float) -> int:
    t = time.perf_counter()
    step()
    step()
    return max(1, int(seconds / ((time.perf_counter() - t) / 2)))


def run(name: str, configs: list[str], rounds: int, seconds: float, dll: ctypes.CDLL, seed: int) -> list[dict]:
    step = WORKLOADS[name]()
    for _ in range(5):
        step()
    n = steps_for(step, seconds)
    rng = random.Random(seed)
    rows: list[dict] = []
    counts = (ctypes.c_uint64 * 3)()
    for r in range(rounds):
        order = configs[:]
        rng.shuffle(order)
        for cfg in order:
            rc = dll.floor_set(CONFIGS[cfg])
            if rc != 0:
                raise SystemExit(f"floor_set({cfg}) failed: {rc}")
            for _ in range(SETTLE.get(name, 2)):
                step()
            dll.floor_counts(counts)  # the settling steps' callbacks and records out of the count
            base = (counts[0], counts[1])
            t = time.perf_counter()
            for _ in range(n):
                step()
            dt = time.perf_counter() - t
            dll.floor_counts(counts)
            rows.append({"workload": name, "config": cfg, "round": r, "steps": n, "seconds": dt,
                         "steps_per_s": n / dt, "callbacks_per_step": (counts[0] - base[0]) / n,
                         "records_per_step": (counts[1] - base[1]) / n, "finalizes": counts[2]})
            print(json.dumps(rows[-1]), flush=True)
    dll.floor_set(0)
    return rows


def summary(name: str, rows: list[dict], configs: list[str]) -> list[dict]:
    out = []
    rounds = sorted({r["round"] for r in rows})
    for cfg in configs:
        ratios = []
        for rd in rounds:
            off = [r["steps_per_s"] for r in rows if r["round"] == rd and r["config"] == "off"]
            on = [r["steps_per_s"] for r in rows if r["round"] == rd and r["config"] == cfg]
            if off and on:
                ratios.append(statistics.fmean(off) / on[0])
        mine = [r for r in rows if r["config"] == cfg]
        out.append({"workload": name, "config": cfg, "ratio_median": statistics.median(ratios),
                    "ratio_min": min(ratios), "ratio_max": max(ratios),
                    "steps_per_s": statistics.median(r["steps_per_s"] for r in mine),
                    "callbacks_per_step": statistics.median(r["callbacks_per_step"] for r in mine),
                    "records_per_step": statistics.median(r["records_per_step"] for r in mine)})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="launch_bound,resnet50,gpt2")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block", type=float, default=1.0, help="seconds a timed block lasts (about)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pin", action="store_true", help="run on the first half of the CPUs (the rest idle)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, cpus[: max(1, len(cpus) // 2)])  # threads started later inherit it
    configs = args.configs.split(",")
    if "off" not in configs:
        configs.insert(0, "off")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        ap.error(f"unknown configurations {unknown} (known: {', '.join(CONFIGS)})")
    import torch

    torch.cuda.init()
    with tempfile.TemporaryDirectory() as tmp:
        dll = build(Path(tmp))
        if dll.floor_init() != 0:
            raise SystemExit("floor_init failed")
        rows, sums = [], []
        for name in args.workloads.split(","):
            got = run(name, configs, args.rounds, args.block, dll, args.seed)
            rows += got
            sums += summary(name, got, configs)
    print(f"\n{'workload':14} {'config':22} {'ratio':>7} {'min':>6} {'max':>6} {'steps/s':>9} {'callbacks':>9} "
          f"{'records':>8}  (per step)")
    for s in sums:
        print(f"{s['workload']:14} {s['config']:22} {s['ratio_median']:7.4f} {s['ratio_min']:6.3f} "
              f"{s['ratio_max']:6.3f} {s['steps_per_s']:9.2f} {s['callbacks_per_step']:9.1f} "
              f"{s['records_per_step']:8.1f}")
    for s in sums:
        print(json.dumps(s))
    if args.out:
        Path(args.out).write_text(json.dumps(rows + sums, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
