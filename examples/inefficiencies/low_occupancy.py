"""Rule low-occupancy: a memory-bound scale whose blocks each reserve 96 KiB of
shared memory they do not use, so two blocks fit on a multiprocessor (scale_hog). Fixed: no reservation."""

from __future__ import annotations

from _planted import check, planted
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=200)
    lib = planted()

    def run(n: int) -> None:
        check(lib.planted_low_occupancy(int(args.fixed), n))  # LINE_LOW_OCCUPANCY

    serve(run, lambda: check(lib.planted_sync()), args)


if __name__ == "__main__":
    main()
