"""PyTorch on a GPU with known lines (tests/gpu/test_torch.py reads the LINE_ markers).

Prints "ready <pid>" once CUDA is initialized and warm, waits for "go" on stdin, runs, prints "done".
"""

from __future__ import annotations

import os
import sys

import torch

N_MUL, N_ITEM = 1000, 50


def multiply(x: torch.Tensor) -> torch.Tensor:
    y = x
    for _ in range(N_MUL):
        y = x * 2  # LINE_MUL
    return y


def wait_for_gpu() -> None:
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):
        a = a @ a / 64  # LINE_MATMUL
    torch.cuda.synchronize()  # LINE_SYNC


def read_scalars(x: torch.Tensor) -> float:
    total = 0.0
    for _ in range(N_ITEM):
        total += (x.sum()).item()  # LINE_ITEM
    return total


def main() -> None:
    x = torch.ones(1024, device="cuda")
    multiply(x)
    read_scalars(x)  # warm: kernels loaded, caching allocator primed
    torch.cuda.synchronize()
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    multiply(x)
    wait_for_gpu()
    read_scalars(x)
    torch.cuda.synchronize()
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
