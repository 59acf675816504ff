"""What every example here does, so a harness can time it and attach deepctx before the timed part
(tests/harness.py StdinTarget): warm up, print "ready <pid>", then for each line read on stdin run the
timed steps and print "done <seconds>". --once runs the timed steps once, without stdin."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable


def options(doc: str, steps: int) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--fixed", action="store_true", help="run the fixed variant")
    p.add_argument("--steps", type=int, default=steps, help=f"timed steps per run (default {steps})")
    p.add_argument("--once", action="store_true", help="run the timed steps once and exit")
    return p.parse_args()


def compile_mode() -> str:
    """torch.compile's mode for the examples that compile: DEEPCTX_EXAMPLE_COMPILE_MODE (e.g. max-autotune), else
    the default."""
    return os.environ.get("DEEPCTX_EXAMPLE_COMPILE_MODE") or "default"


def serve(run: Callable[[int], None], finish: Callable[[], None], args: argparse.Namespace, warmup: int = 3) -> None:
    """run(n) does n steps; finish() waits until the GPU is done (so the time is the work's)."""
    run(warmup)
    finish()
    if not args.once:
        print(f"ready {os.getpid()}", flush=True)
    for _ in [None] if args.once else sys.stdin:
        start = time.perf_counter()
        run(args.steps)
        finish()
        print(f"done {time.perf_counter() - start:.6f}", flush=True)
