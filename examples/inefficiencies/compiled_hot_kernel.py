"""Rule compiled-hot-kernel: a compiled function whose one fused kernel, a chain of elementwise operations over a
large tensor, is nearly all of the GPU's time; the finding names its model lines. Fixed: the chain uncompiled (the
rule speaks of compiled code only). DEEPCTX_EXAMPLE_COMPILE_MODE=max-autotune: compiled in that mode instead."""

from __future__ import annotations

import torch
from _protocol import compile_mode, options, serve


def chain(x: torch.Tensor) -> torch.Tensor:
    y = torch.sin(x) * 1.5 + 0.25  # LINE_COMPILED_HOT_KERNEL
    y = torch.tanh(y) * torch.cos(x)
    return torch.sigmoid(y) + x * 0.5


def main() -> None:
    args = options(__doc__ or "", steps=200)
    torch.manual_seed(0)
    fn = chain if args.fixed else torch.compile(chain, mode=compile_mode())
    x = torch.randn(64 * 1024 * 1024, device="cuda")

    def run(n: int) -> None:
        for _ in range(n):
            fn(x)

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
