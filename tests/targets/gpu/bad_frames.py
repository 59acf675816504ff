"""Launches with the frame pointer register holding no frame (tests/targets/frames/frames.c).

    python bad_frames.py LIBFRAMES LIBCUDART

Prints "ready <pid>", waits for "go", makes N launches of each kind at its own line, prints "done".
"""

from __future__ import annotations

import ctypes
import os
import sys

N = 4


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    assert lib.frames_init(sys.argv[2].encode()) == 0
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    for _ in range(N):
        lib.launch_below_stack()  # LINE_BELOW
        lib.launch_misaligned()  # LINE_MISALIGNED
        lib.launch_small_integer()  # LINE_SMALL
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
