"""Hands launches to a C thread pool (tests/targets/handoff) from known Python lines.

    python handoff_calls.py LIBHANDOFF LIBCUDART

Prints "ready <pid>", waits for "go", calls handoff_run ROUNDS times at LINE_HANDOFF, prints "done".
"""

from __future__ import annotations

import ctypes
import os
import sys

ROUNDS, PER_ROUND = 6, 5


def backward_like(lib: ctypes.CDLL) -> None:
    for _ in range(ROUNDS):
        lib.handoff_run(PER_ROUND)  # LINE_HANDOFF


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    assert lib.handoff_init(sys.argv[2].encode(), 2) == 0
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    backward_like(lib)
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
