"""cudaLaunchKernel of a real CUDA runtime from call paths whose frames sit at the same addresses: one inner
function called from two lines of one caller in turn, a second function whose frame takes the same place,
then a run of calls from one line. The GPU probes' Python walk reuses a CPU's last stack only where every
frame is the one it walked last (probes/python_stack.bpf.h, raw_cache); no GPU needed.

    python same_frames.py LIBCUDART N

Prints "ready <pid>", waits for a line on stdin, makes 4 * N launches, prints "done" and waits again.
"""

from __future__ import annotations

import ctypes
import os
import sys

GRID = ctypes.c_uint64(1 | (1 << 32))  # dim3 (1, 1, 1)
ONE = ctypes.c_uint32(1)
NO_BYTES = ctypes.c_size_t(0)


def inner(launch: ctypes._CFuncPtr, stub: ctypes.c_void_p) -> None:
    launch(stub, GRID, ONE, GRID, ONE, None, NO_BYTES, None)  # LINE_INNER


def other(launch: ctypes._CFuncPtr, stub: ctypes.c_void_p) -> None:
    launch(stub, GRID, ONE, GRID, ONE, None, NO_BYTES, None)  # LINE_OTHER


def calls(launch: ctypes._CFuncPtr, stub: ctypes.c_void_p, n: int) -> None:
    for _ in range(n):  # no two calls in a row share a stack: inner's frame alike, its caller's line not
        inner(launch, stub)  # LINE_FIRST
        inner(launch, stub)  # LINE_SECOND
        other(launch, stub)  # LINE_THIRD
    for _ in range(n):  # one stack n times
        inner(launch, stub)  # LINE_RUN


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    n = int(sys.argv[2])
    stub = ctypes.c_void_p(ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value or 0)
    # on one CPU: the walk's cache is per CPU, and a thread moved between two calls walks again
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    calls(lib.cudaLaunchKernel, stub, n)  # LINE_CALLS
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()  # LINE_MAIN
