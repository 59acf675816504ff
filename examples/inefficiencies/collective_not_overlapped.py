"""Rule collective-not-overlapped: gradient buckets all-reduced (NCCL) one after another once all of the
backward-like compute is done, so the GPU either computes or communicates. Fixed: each all-reduce starts
(async_op=True) as soon as its bucket is ready and runs beside the next bucket's compute.

Data parallel over two GPUs: this process is rank 0, the one a harness drives and profiles; it starts
rank 1 on the second GPU as a child that mirrors its steps. Each bucket's compute is sized at start-up to
take about as long as one bucket's all-reduce on this machine's link, so there is something to overlap.
With one GPU it runs alone (world size 1): the all-reduce is then a local kernel that competes with the
compute for the same memory and multiprocessors, and the fix gains little (the rule's GPU test needs two)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from _protocol import options, serve

BUCKETS, BUCKET = 8, 64 << 20  # 8 buckets of 256 MiB of float32
PEER = "DEEPCTX_EXAMPLE_PEER_STORE"  # set in rank 1's environment: the rendezvous file


def die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: no orphaned rank 1


def start_peer(store: str, fixed: bool) -> subprocess.Popen:
    argv = [sys.executable, __file__] + (["--fixed"] if fixed else [])
    return subprocess.Popen(argv, env=dict(os.environ, **{PEER: store}), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, preexec_fn=die_with_parent)


def gpu_ms(fn: Callable[[], object], n: int = 5) -> float:
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def main() -> None:
    args = options(__doc__ or "", steps=100)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast
    store = os.environ.get(PEER)
    rank = 1 if store else 0
    world = 1 if rank == 0 and torch.cuda.device_count() < 2 else 2
    peer = None
    if rank == 0:
        store = tempfile.mktemp(prefix="deepctx-nccl-")
        if world == 2:
            peer = start_peer(store, args.fixed)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    x = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) / 128
    grads = [torch.zeros(BUCKET, device="cuda") for _ in range(BUCKETS)]

    # matrix products per bucket: as many as one bucket's all-reduce lasts (rank 0 decides for both)
    reps = torch.tensor([max(1, round(gpu_ms(lambda: dist.all_reduce(grads[0])) / gpu_ms(lambda: x @ w)))],
                        device="cuda")
    dist.broadcast(reps, src=0)
    per_bucket = int(reps.item())

    def bucket(i: int) -> None:
        h = x
        for _ in range(per_bucket):
            h = h @ w
        grads[i][: h.numel()].copy_(h.flatten())

    def steps(n: int) -> None:
        for _ in range(n):
            if args.fixed:
                works = []
                for i in range(BUCKETS):
                    bucket(i)
                    works.append(dist.all_reduce(grads[i], op=dist.ReduceOp.AVG, async_op=True))
                for work in works:
                    work.wait()
                continue
            for i in range(BUCKETS):
                bucket(i)
            for g in grads:
                dist.all_reduce(g, op=dist.ReduceOp.AVG)  # LINE_COLLECTIVE_NOT_OVERLAPPED

    def run(n: int) -> None:
        """Rank 0 tells rank 1 how many steps come (a negative count: stop), then both run them."""
        dist.broadcast(torch.tensor([n], device="cuda"), src=0)
        steps(n)

    if rank == 1:
        count = torch.zeros(1, dtype=torch.int64, device="cuda")
        while True:
            dist.broadcast(count, src=0)
            if int(count.item()) < 0:
                break
            steps(int(count.item()))
        torch.cuda.synchronize()
    else:
        print(f"world size {world}, {per_bucket} matrix products per bucket", file=sys.stderr, flush=True)
        serve(run, torch.cuda.synchronize, args)
        dist.broadcast(torch.tensor([-1], device="cuda"), src=0)
        torch.cuda.synchronize()
    dist.destroy_process_group()
    if peer is not None:
        peer.wait(timeout=120)
    if rank == 0:
        Path(store).unlink(missing_ok=True)  # the file store may have removed it already


if __name__ == "__main__":
    main()
