"""Rule collective-not-overlapped: gradient buckets all-reduced (NCCL, world size 1) one after another once
all of the backward-like compute is done, so the GPU either computes or communicates. Fixed: each
all-reduce starts (async_op=True) as soon as its bucket is ready and runs beside the next bucket's compute.

The compute is matrix products too small to fill the GPU (32 blocks each) and each all-reduce (an
average: one rank still scales the bucket in a kernel) streams 256 MiB, so the two can share the GPU."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from _protocol import options, serve

BUCKETS, BUCKET = 8, 64 << 20  # 8 buckets of 256 MiB of float32


def main() -> None:
    args = options(__doc__ or "", steps=200)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    store = tempfile.mktemp(prefix="deepctx-nccl-")
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    grads = [torch.zeros(BUCKET, device="cuda") for _ in range(BUCKETS)]

    def bucket(i: int) -> None:
        h = x
        for _ in range(6):
            h = h @ w
        grads[i][: h.numel()].copy_(h.flatten())

    def run(n: int) -> None:
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

    serve(run, torch.cuda.synchronize, args)
    dist.destroy_process_group()
    Path(store).unlink(missing_ok=True)  # the file store may have removed it already


if __name__ == "__main__":
    main()
