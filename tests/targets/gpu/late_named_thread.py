"""A thread that exists, unnamed, when the capture lists the process's threads, and names itself only
before its launches (as a thread does between its clone and its pthread_setname_np), then exits.

    python late_named_thread.py LIBCUDART [NAME [TID]]

Prints "ready <pid> <tid>" with the thread waiting; on a line, the thread names itself NAME ("late-named"),
makes LAUNCHES cudaLaunchKernel calls (errors without a GPU; the probes fire anyway) and exits; prints "done".
With TID (root), the thread is made with that tid, which an earlier thread of another process had: the
kernel's last pid is set below it (/proc/sys/kernel/ns_last_pid) before each try, as checkpoint/restore does.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

LAUNCHES = 3
PR_SET_NAME = 15


TID_TRIES = 200


def work(lib: ctypes.CDLL, go: threading.Event, name: bytes, want_tid: int) -> None:
    if want_tid and threading.get_native_id() != want_tid:
        return  # another process took the tid between the write and the clone: main tries again
    go.wait()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_NAME, name, 0, 0, 0) == 0, ctypes.get_errno()
    stub = ctypes.cast(lib.cudaLaunchKernel, ctypes.c_void_p).value  # any host address names a "kernel"
    one = ctypes.c_uint64(1 | (1 << 32))
    for _ in range(LAUNCHES):
        lib.cudaLaunchKernel(ctypes.c_void_p(stub), one, ctypes.c_uint32(1), one, ctypes.c_uint32(1), None,
                             ctypes.c_size_t(0), None)


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    name = (sys.argv[2] if len(sys.argv) > 2 else "late-named").encode()
    want_tid = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    go = threading.Event()
    for _ in range(TID_TRIES):
        if want_tid:
            with open("/proc/sys/kernel/ns_last_pid", "w") as f:
                f.write(str(want_tid - 1))
        worker = threading.Thread(target=work, args=(lib, go, name, want_tid))
        worker.start()
        if not want_tid or worker.native_id == want_tid:
            break
        worker.join()
    else:
        sys.exit(f"no thread got tid {want_tid} in {TID_TRIES} tries")
    print(f"ready {os.getpid()} {worker.native_id}", flush=True)
    sys.stdin.readline()
    go.set()
    worker.join()
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
