"""Rule fp32-gemm: 4096x4096 float32 matrix products on the CUDA cores (PyTorch's default for float32
matmul). Fixed: TF32 tensor cores allowed (torch.set_float32_matmul_precision("high"))."""

from __future__ import annotations

import torch
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=300)
    torch.set_float32_matmul_precision("high" if args.fixed else "highest")
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")

    def run(n: int) -> None:
        for _ in range(n):
            torch.mm(a, b)  # LINE_FP32_GEMM

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
