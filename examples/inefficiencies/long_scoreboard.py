"""Rule long-scoreboard: a grid-stride sum over 64 MiB whose every load is consumed at
once, with 4 warps per multiprocessor: warps wait on global loads (kernels/planted.cu sum_dependent). Fixed:
four independent loads in flight per thread and 64 warps per multiprocessor (sum_prefetched, 16x the blocks)."""

from __future__ import annotations

from _planted import check, planted
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=200)
    lib = planted()

    def run(n: int) -> None:
        check(lib.planted_long_scoreboard(int(args.fixed), n))  # LINE_LONG_SCOREBOARD

    serve(run, lambda: check(lib.planted_sync()), args)


if __name__ == "__main__":
    main()
