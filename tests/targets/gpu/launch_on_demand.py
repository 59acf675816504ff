"""Launches through the real CUDA runtime on demand: each line N on stdin makes N cudaLaunchKernel calls
(errors without a GPU; the probes fire on the real entry point anyway) and prints "done N".

    python launch_on_demand.py LIBCUDART
"""

from __future__ import annotations

import ctypes
import os
import sys


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    stub = ctypes.cast(lib.cudaLaunchKernel, ctypes.c_void_p).value  # any host address names a "kernel"
    one = ctypes.c_uint64(1 | (1 << 32))
    print(f"ready {os.getpid()}", flush=True)
    for line in sys.stdin:
        n = int(line)
        for _ in range(n):
            lib.cudaLaunchKernel(ctypes.c_void_p(stub), one, ctypes.c_uint32(1), one, ctypes.c_uint32(1), None,  # LINE_ON_DEMAND
                                 ctypes.c_size_t(0), None)
        print(f"done {n}", flush=True)


if __name__ == "__main__":
    main()
