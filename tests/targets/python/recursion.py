"""A Python recursion 300 frames deep, spinning at the bottom."""

import sys

from _common import native_id, ready, running

DEPTH = 300


def bottom():
    while running():  # bottom-loop
        pass  # bottom-loop


def recurse(n):
    if n == 0:
        return bottom()  # call-bottom
    return recurse(n - 1)  # recurse-call


sys.setrecursionlimit(10_000)
ready(tid=native_id(), depth=DEPTH)
recurse(DEPTH)
