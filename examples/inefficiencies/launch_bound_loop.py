"""Rule launch-bound-loop: 100 tiny elementwise kernels per step, launched one at a time from one line.
Fixed: the same arithmetic as one tensor operation."""

from __future__ import annotations

import torch
from _protocol import options, serve

REPEATS = 100


def main() -> None:
    args = options(__doc__ or "", steps=500)
    x = torch.ones(256, device="cuda")
    out = torch.empty_like(x)

    def run(n: int) -> None:
        for _ in range(n):
            if args.fixed:
                out.copy_(x * 1.0001**REPEATS)
                continue
            y = x
            for _ in range(REPEATS):
                y = y * 1.0001  # LINE_LAUNCH_BOUND_LOOP
            out.copy_(y)

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
