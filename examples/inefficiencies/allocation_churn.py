"""Rule allocation-churn: torch.cuda.empty_cache() in the loop hands a 256 MiB buffer back to the driver
every step, so the next step allocates it again (cudaFree, cudaMalloc). Fixed: no empty_cache()."""

from __future__ import annotations

import torch
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=2000)

    def run(n: int) -> None:
        for _ in range(n):
            buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
            buf.fill_(1)
            del buf
            if not args.fixed:
                torch.cuda.empty_cache()  # LINE_ALLOCATION_CHURN

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
