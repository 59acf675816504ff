"""Named threads waiting on an event, or spinning (--spin: the main thread too, until the test kills the target),
plus a thread pool's worker and a renamed main thread (--renamed-main):
deepctx names each thread by its threading name (tests/unit/python/test_thread_names.py,
tests/integration/python/test_python_stacks.py)."""

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from _common import native_id, ready, running

SPIN = "--spin" in sys.argv
go = threading.Event()
tids = {}
started = threading.Barrier(5)


def work():
    tids[threading.current_thread().name] = native_id()
    started.wait()
    while SPIN and not go.is_set():  # on the CPU, for a profiler's samples
        pass
    go.wait()


if "--renamed-main" in sys.argv:
    threading.current_thread().name = "coordinator"
tids[threading.current_thread().name] = native_id()
workers = [threading.Thread(target=work, name=name) for name in ("work_0", "work_1", "données-ü")]
for w in workers:
    w.start()
pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pool")
pool.submit(work)
started.wait()
ready(threads=tids)
while SPIN and running():  # every thread on the CPU: the main thread outside threading.py's code
    pass
sys.stdin.readline()  # the main thread waits outside threading.py; the workers wait inside it
go.set()
for w in workers:
    w.join()
pool.shutdown()
