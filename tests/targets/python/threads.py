"""Eight threads, each spinning in its own function."""

import threading

from _common import native_id, ready, running

tids = {}
started = threading.Barrier(9)


def spin_0():
    tids["spin_0"] = native_id()
    started.wait()
    while running():
        pass


def spin_1():
    tids["spin_1"] = native_id()
    started.wait()
    while running():
        pass


def spin_2():
    tids["spin_2"] = native_id()
    started.wait()
    while running():
        pass


def spin_3():
    tids["spin_3"] = native_id()
    started.wait()
    while running():
        pass


def spin_4():
    tids["spin_4"] = native_id()
    started.wait()
    while running():
        pass


def spin_5():
    tids["spin_5"] = native_id()
    started.wait()
    while running():
        pass


def spin_6():
    tids["spin_6"] = native_id()
    started.wait()
    while running():
        pass


def spin_7():
    tids["spin_7"] = native_id()
    started.wait()
    while running():
        pass


workers = [threading.Thread(target=f) for f in (spin_0, spin_1, spin_2, spin_3, spin_4, spin_5, spin_6, spin_7)]
for w in workers:
    w.start()
started.wait()
ready(threads=tids)
for w in workers:
    w.join()
