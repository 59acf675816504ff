"""CPU-bound pure-Python work of real library code, for bench/cpu_vs_pyspy.py: the standard library's own
pure-Python modules (difflib, fractions and statistics, ast, textwrap and pprint) on --threads threads, so a
profile holds many distinct, several-frame-deep stacks across many source files, as a real program's does.

    python stdlib_mix.py [--threads 2]

Prints "ready <pid>" once every thread is working, and works until stdin closes; then exits 0.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import os
import pprint
import random
import statistics
import sys
import textwrap
import threading
from collections.abc import Callable
from fractions import Fraction


def diffs(rng: random.Random) -> None:
    a = [f"line {rng.randrange(50)} of {rng.choice('abcdef') * 3}\n" for _ in range(300)]
    b = [line if rng.random() < 0.8 else "changed\n" for line in a]
    difflib.SequenceMatcher(None, a, b).ratio()
    list(difflib.unified_diff(a, b))


def fractions(rng: random.Random) -> None:
    xs = [Fraction(rng.randrange(1, 1000), rng.randrange(1, 1000)) for _ in range(200)]
    sum(xs)
    statistics.median(xs)
    statistics.stdev(float(x) for x in xs)


def parse(rng: random.Random) -> None:
    source = inspect.getsource(rng.choice([difflib, textwrap, pprint]))
    ast.unparse(ast.parse(source))


def text(rng: random.Random) -> None:
    words = [rng.choice(["alpha", "beta", "gamma", "delta", "epsilon"]) for _ in range(2000)]
    textwrap.fill(" ".join(words), width=rng.randrange(40, 100))
    pprint.pformat({i: {"k": words[i:i + 5], "n": list(range(i % 7))} for i in range(300)})


WORK: list[Callable[[random.Random], None]] = [diffs, fractions, parse, text]


def worker(seed: int, stop: threading.Event, started: threading.Barrier) -> None:
    rng = random.Random(seed)
    started.wait()
    while not stop.is_set():
        rng.choice(WORK)(rng)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    stop = threading.Event()
    started = threading.Barrier(args.threads + 1)
    threads = [threading.Thread(target=worker, args=(i, stop, started), name=f"worker-{i}")
               for i in range(args.threads)]
    for t in threads:
        t.start()
    started.wait()
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.read()
    stop.set()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
