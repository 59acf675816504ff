"""Rule sync-in-loop: the loss is read with .item() every step, so the host's work for the next step
(building its index list, about 1 ms of Python) cannot overlap with the GPU's (about 1 ms).
Fixed: the loss is summed on the GPU and read once after the loop."""

from __future__ import annotations

import random

import torch
from _protocol import options, serve


def next_indices(rng: random.Random, n: int = 4096) -> list[int]:
    order = [rng.randrange(1 << 20) for _ in range(n)]
    order.sort()
    return order


def main() -> None:
    args = options(__doc__ or "", steps=500)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    rng = random.Random(0)

    def run(n: int) -> None:
        total = 0.0
        total_gpu = torch.zeros((), device="cuda")
        for _ in range(n):
            idx = next_indices(rng)
            y = a[: len(idx) // 2] @ a
            for _ in range(4):
                y = y @ a
            loss = y.float().square().mean()
            if args.fixed:
                total_gpu += loss.detach()
            else:
                total += loss.item()  # LINE_SYNC_IN_LOOP
        if args.fixed:
            total = total_gpu.item()

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
