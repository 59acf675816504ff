"""Launches of a real CUDA runtime from one line, as a jitted JAX function's kernels run: for the test of XLA's
dumped modules (tests/integration/test_compiled_code.py). No GPU and no JAX needed: the launches fail inside the
runtime, the probes count them; the kernel is named after the host stub's symbol (getpid).

    python jitted_launches.py LIBCUDART N

Prints "ready <pid>", waits for a line on stdin, launches N times, prints "done" and waits again."""

from __future__ import annotations

import ctypes
import os
import sys

GRID = ctypes.c_uint64(1 | (1 << 32))  # dim3 (1, 1, 1)
ONE = ctypes.c_uint32(1)
NO_BYTES = ctypes.c_size_t(0)


def step(launch: object, stub: ctypes.c_void_p) -> None:
    launch(stub, GRID, ONE, GRID, ONE, None, NO_BYTES, None)  # LINE_JITTED


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    n = int(sys.argv[2])
    stub = ctypes.c_void_p(ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value or 0)
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    for _ in range(n):
        step(lib.cudaLaunchKernel, stub)  # LINE_CALLER
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
