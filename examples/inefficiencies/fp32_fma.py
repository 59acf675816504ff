"""Rule fp32-fma: a tiled 2048 x 2048 SGEMM on the CUDA cores, its inner loop FFMA
(sgemm_fma). Fixed: the same product on the tensor cores, WMMA with TF32 inputs (sgemm_tf32)."""

from __future__ import annotations

from _planted import check, planted
from _protocol import options, serve


def main() -> None:
    args = options(__doc__ or "", steps=20)
    lib = planted()

    def run(n: int) -> None:
        check(lib.planted_fp32_fma(int(args.fixed), n))  # LINE_FP32_FMA

    serve(run, lambda: check(lib.planted_sync()), args)


if __name__ == "__main__":
    main()
