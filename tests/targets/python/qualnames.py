"""Methods, nested functions and lambdas, each spinning in its own thread, to check that frames
carry the names CPython gives them (co_qualname)."""

import threading

from _common import native_id, ready, running

tids = {}
started = threading.Barrier(6)


class Outer:
    def method(self):
        tids["Outer.method"] = native_id()
        started.wait()
        while running():
            pass

    class Inner:
        @staticmethod
        def static():
            tids["Outer.Inner.static"] = native_id()
            started.wait()
            while running():
                pass

    @classmethod
    def klass(cls):
        tids["Outer.klass"] = native_id()
        started.wait()
        while running():
            pass


def outer():
    def inner():
        tids["outer.<locals>.inner"] = native_id()
        started.wait()
        while running():
            pass

    inner()


def spin_forever():
    while running():
        pass


def register(name):
    tids[name] = native_id()
    started.wait()
    return True


spin_lambda = lambda: register("<lambda>") and spin_forever()  # noqa: E731

workers = [
    threading.Thread(target=Outer().method),
    threading.Thread(target=Outer.Inner.static),
    threading.Thread(target=Outer.klass),
    threading.Thread(target=outer),
    threading.Thread(target=spin_lambda),
]
for w in workers:
    w.start()
started.wait()
ready(threads=tids)
for w in workers:
    w.join()
