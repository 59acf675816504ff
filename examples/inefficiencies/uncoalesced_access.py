"""Rule uncoalesced-access: a naive transpose of a 2048 x 2048 matrix: a warp's 32 stores
go down a column, 2048 floats apart (kernels/planted.cu transpose_naive). Fixed: the transpose through a
padded shared-memory tile, reads and writes along rows (transpose_tiled<1>)."""

from __future__ import annotations

from _planted import check, planted
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=200)
    lib = planted()

    def run(n: int) -> None:
        check(lib.planted_uncoalesced_access(int(args.fixed), n))  # LINE_UNCOALESCED_ACCESS

    serve(run, lambda: check(lib.planted_sync()), args)


if __name__ == "__main__":
    main()
