"""Fixed pure-Python work on 4 threads, for bench/cpu_sampling.py --target python4.

    python python_threads.py ROUNDS

Prints "ready <pid>", waits for a line on stdin, runs, prints "done <seconds>".
"""

from __future__ import annotations

import os
import sys
import threading
import time


def work(rounds: int) -> None:
    total = 0
    for i in range(rounds):
        total += sum(j * j for j in range(100)) % (i + 1)


def main() -> None:
    rounds = int(sys.argv[1])
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(rounds,), name=f"worker-{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"done {time.perf_counter() - t0:.6f}", flush=True)


if __name__ == "__main__":
    main()
