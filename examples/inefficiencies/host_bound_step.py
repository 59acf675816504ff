"""Rule host-bound-step: a learning-rate factor computed in Python every step while the GPU waits.
Fixed: the schedule is computed once, before the loop."""

from __future__ import annotations

import math

import torch
from _protocol import options, serve

TERMS = 20_000  # about 2 ms of Python per step, against about 0.6 ms of GPU work


def lr_factor(step: int) -> float:
    return sum([math.cos(i * 1e-4 + step) for i in range(TERMS)]) / TERMS  # LINE_HOST_BOUND_STEP


def main() -> None:
    args = options(__doc__ or "", steps=400)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    table = [lr_factor(s) for s in range(args.steps)] if args.fixed else []

    def run(n: int) -> None:
        y = a
        for step in range(n):
            f = table[step % len(table)] if args.fixed else lr_factor(step)
            y = (a @ a) * f
            y = (y @ a) * f
            y = (y @ a) * f
        del y

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
