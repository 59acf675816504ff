"""Rule bank-conflicts: a 32 x 32 tiled transpose through a [32][32] shared tile:
reading a column puts a warp's 32 accesses in one bank (transpose_tiled<0>). Fixed: the [32][33] tile."""

from __future__ import annotations

from _planted import check, planted
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=200)
    lib = planted()

    def run(n: int) -> None:
        check(lib.planted_bank_conflicts(int(args.fixed), n))  # LINE_BANK_CONFLICTS

    serve(run, lambda: check(lib.planted_sync()), args)


if __name__ == "__main__":
    main()
