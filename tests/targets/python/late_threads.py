"""Starts a thread only when told to (a line on stdin), to check that threads created after the
profiler attached are profiled."""

import sys
import threading

from _common import native_id, ready, running


def late_worker():
    ready(late_tid=native_id())
    while running():
        pass


ready(tid=native_id())
sys.stdin.readline()
t = threading.Thread(target=late_worker)
t.start()
t.join()
