"""Rule small-grid: a Triton row-sum kernel launched with one program per row: 8 blocks on a GPU with 132
multiprocessors, each block reading 32 MiB alone. Fixed: x.sum(dim=1), which spreads the rows over the
whole GPU."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from _protocol import options, serve

ROWS, COLS = 8, 8 << 20


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):  # noqa: ANN001, ANN201
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def main() -> None:
    args = options(__doc__ or "", steps=600)
    x = torch.randn(ROWS, COLS, device="cuda")
    out = torch.empty(ROWS, device="cuda")

    def run(n: int) -> None:
        for _ in range(n):
            if args.fixed:
                torch.sum(x, dim=1, out=out)
            else:
                row_sum_kernel[(ROWS,)](x, out, COLS, BLOCK=1024)  # LINE_SMALL_GRID

    serve(run, torch.cuda.synchronize, args)


if __name__ == "__main__":
    main()
