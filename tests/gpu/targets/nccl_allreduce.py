"""NCCL all-reduces through torch.distributed (one rank on one GPU) at a known line."""

from __future__ import annotations

import os
import sys
import tempfile

import torch
import torch.distributed as dist

N_ALLREDUCE, ELEMENTS = 20, 1 << 20  # float32: 4 MiB each


def main() -> None:
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    store = tempfile.mktemp(prefix="deepctx-nccl-")
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    x = torch.ones(ELEMENTS, device="cuda")
    dist.all_reduce(x)  # warm: communicator set up, kernels loaded
    torch.cuda.synchronize()
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    for _ in range(N_ALLREDUCE):
        dist.all_reduce(x)  # LINE_ALLREDUCE
    torch.cuda.synchronize()
    print("done", flush=True)
    sys.stdin.readline()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
