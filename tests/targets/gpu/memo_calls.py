"""One lost point reached from two native caller chains (tests/targets/gpu/memo.c), for the memoized continuation.

    python memo_calls.py LIBMEMO LIBCUDART

Pins itself to one CPU (the memo is per CPU: its hits are then exact), prints "ready <pid>", waits for a line,
launches RUN_A times through chain a, RUN_B times through chain b, then ALTERNATE times a and b in turn, all
from one Python line; prints "done".
"""

from __future__ import annotations

import ctypes
import os
import sys

RUN_A, RUN_B, ALTERNATE = 40, 30, 20


def run(lib: ctypes.CDLL, which: int, n: int) -> None:
    lib.memo_run(which, n)  # LINE_RUN


def main() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    lib = ctypes.CDLL(sys.argv[1])
    lib.memo_run.argtypes, lib.memo_run.restype = [ctypes.c_int, ctypes.c_long], ctypes.c_long
    assert lib.memo_init(sys.argv[2].encode()) == 0
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    run(lib, 0, RUN_A)
    run(lib, 1, RUN_B)
    for i in range(ALTERNATE):
        run(lib, i & 1, 1)
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
