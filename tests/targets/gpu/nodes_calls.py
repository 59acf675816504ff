"""Forward / backward through a miniature autograd (tests/targets/handoff/nodes.cc).

    python nodes_calls.py LIBNODES LIBCUDART

Prints "ready <pid>", waits for a line, runs ROUNDS steps (two nodes created at known lines, then
backward on a worker thread), prints "done".
"""

from __future__ import annotations

import ctypes
import os
import sys

ROUNDS = 4


def forward(lib: ctypes.CDLL) -> None:
    lib.nodes_matmul()  # LINE_MATMUL
    lib.nodes_relu()  # LINE_RELU


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    assert lib.nodes_init(sys.argv[2].encode()) == 0
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    for _ in range(ROUNDS):
        forward(lib)
        lib.nodes_backward()  # LINE_BACKWARD
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
