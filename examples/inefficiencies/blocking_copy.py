"""Rule blocking-copy: each step uploads a 64 MiB batch from pageable memory with .to("cuda"), which waits
for the copy (and for the GPU's previous work). Fixed: the batch is pinned, copied with non_blocking=True
on a side stream, one step ahead, so the copy overlaps with compute."""

from __future__ import annotations

import torch
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=150)
    host = torch.randn(4096, 4096)  # 64 MiB of float32
    if args.fixed:
        host = host.pin_memory()
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    copies = torch.cuda.Stream()

    def compute(x: torch.Tensor) -> None:
        y = x.bfloat16()
        for _ in range(12):
            y = y @ w

    def run_blocking(n: int) -> None:
        for _ in range(n):
            x = host.to("cuda")  # LINE_BLOCKING_COPY
            compute(x)

    def run_prefetched(n: int) -> None:
        with torch.cuda.stream(copies):
            nxt = host.to("cuda", non_blocking=True)
        for _ in range(n):
            torch.cuda.current_stream().wait_stream(copies)
            x = nxt
            x.record_stream(torch.cuda.current_stream())
            with torch.cuda.stream(copies):
                nxt = host.to("cuda", non_blocking=True)  # the next batch, while this one computes
            compute(x)
        torch.cuda.current_stream().wait_stream(copies)

    serve(run_prefetched if args.fixed else run_blocking, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
