"""Rule warp-divergence: odd and even threads of every warp take two different
256-step paths, so each warp runs both (branchy_lanes). Fixed: the same work split by warp, each warp one path
(branchy_warps)."""

from __future__ import annotations

from _planted import check, planted
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=100)
    lib = planted()

    def run(n: int) -> None:
        check(lib.planted_warp_divergence(int(args.fixed), n))  # LINE_WARP_DIVERGENCE

    serve(run, lambda: check(lib.planted_sync()), args)


if __name__ == "__main__":
    main()
