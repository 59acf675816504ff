"""A Triton kernel, compiled and first launched after the profiler attached (so its name is learned
from cuModuleGetFunction), launched at a known line."""

from __future__ import annotations

import os
import sys

import torch
import triton
import triton.language as tl

N_LAUNCH = 100


@triton.jit
def deepctx_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = x.numel()
    for _ in range(N_LAUNCH):
        deepctx_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)  # LINE_TRITON


def main() -> None:
    x = torch.ones(1 << 20, device="cuda")
    y = torch.ones_like(x)
    out = torch.empty_like(x)
    torch.cuda.synchronize()
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    run(x, y, out)
    torch.cuda.synchronize()
    assert float(out[0]) == 2.0
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
