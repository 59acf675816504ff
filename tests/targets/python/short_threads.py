"""Threads that live 0.2 s each, one after another, as a data loader's or a request handler's do. Each runs
Python from its first moment, so each of its samples should carry its Python frames.

Prints `ready <pid> {"tid": <main thread id>, ...}`. An argument sets each thread's life in seconds."""

import sys
import threading
import time

from _common import native_id, ready, running

LIFE_S = float(sys.argv[1]) if len(sys.argv) > 1 else 0.2


def spin_until(end):
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def short_worker():
    spin_until(time.monotonic() + LIFE_S)


ready(tid=native_id(), life_s=LIFE_S)
while running():
    t = threading.Thread(target=short_worker, name="short")
    t.start()
    t.join()
sys.exit(0)
