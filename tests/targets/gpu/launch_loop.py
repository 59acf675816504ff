"""cudaLaunchKernel of a real CUDA runtime in a tight loop from one Python line (no GPU needed: each call fails
inside the runtime after deepctx's probes fired).

    python launch_loop.py LIBCUDART

Prints "ready <pid> <ns>", <ns> the loop's own time an iteration before anything watched it (the median of
five timed stretches of 20,000), and launches until killed.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    stub = ctypes.c_void_p(ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value or 0)
    grid = ctypes.c_uint64(1 | (1 << 32))  # dim3 (1, 1, 1)
    launch = lib.cudaLaunchKernel
    stretches = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(20000):
            launch(stub, grid, ctypes.c_uint32(1), grid, ctypes.c_uint32(1), None, ctypes.c_size_t(0), None)
        stretches.append((time.perf_counter_ns() - t0) / 20000)
    print(f"ready {os.getpid()} {sorted(stretches)[2]:.0f}", flush=True)
    while True:
        launch(stub, grid, ctypes.c_uint32(1), grid, ctypes.c_uint32(1), None, ctypes.c_size_t(0), None)  # LINE_LAUNCH


if __name__ == "__main__":
    main()
