"""A thread that exists, unnamed, when the capture lists the process's threads, and names itself only
before its launches (as a thread does between its clone and its pthread_setname_np), then exits.

    python late_named_thread.py LIBCUDART

Prints "ready <pid> <tid>" with the thread waiting; on a line, the thread names itself "late-named",
makes LAUNCHES cudaLaunchKernel calls (errors without a GPU; the probes fire anyway) and exits; prints "done".
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

LAUNCHES = 3
PR_SET_NAME = 15


def work(lib: ctypes.CDLL, go: threading.Event) -> None:
    go.wait()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_NAME, b"late-named", 0, 0, 0) == 0, ctypes.get_errno()
    stub = ctypes.cast(lib.cudaLaunchKernel, ctypes.c_void_p).value  # any host address names a "kernel"
    one = ctypes.c_uint64(1 | (1 << 32))
    for _ in range(LAUNCHES):
        lib.cudaLaunchKernel(ctypes.c_void_p(stub), one, ctypes.c_uint32(1), one, ctypes.c_uint32(1), None,
                             ctypes.c_size_t(0), None)


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    go = threading.Event()
    worker = threading.Thread(target=work, args=(lib, go))
    worker.start()
    print(f"ready {os.getpid()} {worker.native_id}", flush=True)
    sys.stdin.readline()
    go.set()
    worker.join()
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
