"""Rule uncoalesced-access: one thread per row sums a row-major 2048 x 2048
matrix, so a warp's 32 reads are 2048 floats apart (row_sums_strided). Fixed: the same sums over the
column-major copy, a warp reading 32 neighbouring floats (row_sums_coalesced)."""

from __future__ import annotations

from _planted import check, planted
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=20)
    lib = planted()

    def run(n: int) -> None:
        check(lib.planted_uncoalesced_access(int(args.fixed), n))  # LINE_UNCOALESCED_ACCESS

    serve(run, lambda: check(lib.planted_sync()), args)


if __name__ == "__main__":
    main()
