"""Rule elementwise-chain: the tanh GELU written out as tensor arithmetic: nine elementwise kernels, nine
passes over a 128 MiB tensor. Fixed: torch.nn.functional.gelu(approximate="tanh"), one kernel."""

from __future__ import annotations

import torch
from _protocol import options, serve


def gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))  # LINE_ELEMENTWISE_CHAIN


def main() -> None:
    args = options(__doc__ or "", steps=1000)
    x = torch.randn(32 << 20, device="cuda")

    def run(n: int) -> None:
        for _ in range(n):
            if args.fixed:
                torch.nn.functional.gelu(x, approximate="tanh")
            else:
                gelu(x)

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
