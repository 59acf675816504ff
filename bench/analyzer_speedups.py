"""Achieved speedups of the analyzer's examples, without a profiler: each example of examples/inefficiencies/
run as it is and --fixed, timed by the example itself (its "done <seconds>" line, the fastest of --repeats).

    python bench/analyzer_speedups.py [--rules r1,r2] [--repeats 2] [--json OUT]

The estimated side of the table needs profiles: tests/gpu/test_analyzer.py measures both and writes the
table to $DEEPCTX_ARTIFACTS/analyzer_speedups.md."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "inefficiencies"
RULES = ["host-bound-step", "launch-bound-loop", "sync-in-loop", "blocking-copy", "allocation-churn",
         "elementwise-chain", "dataloader-main-thread", "fp32-gemm", "small-grid", "collective-not-overlapped"]


def timed(path: Path, fixed: bool, repeats: int) -> tuple[float, float]:
    """(fastest timed run in seconds, the process's wall time including start-up and warm-up)."""
    argv = [sys.executable, str(path)] + (["--fixed"] if fixed else [])
    start = time.perf_counter()
    r = subprocess.run(argv, input="go\n" * repeats, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        raise RuntimeError(f"{path.name}{' --fixed' if fixed else ''} failed ({r.returncode}): {r.stderr[-2000:]}")
    done = [float(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("done ")]
    if len(done) != repeats:
        raise RuntimeError(f"{path.name}: expected {repeats} done lines, got {r.stdout!r}")
    return min(done), wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rules", help="comma-separated rule ids (default: all)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    rules = args.rules.split(",") if args.rules else RULES
    rows = []
    print("| rule | inefficient s | fixed s | achieved | process wall s |")
    print("| --- | --- | --- | --- | --- |")
    for rule in rules:
        path = EXAMPLES / (rule.replace("-", "_") + ".py")
        try:
            bad, wall_bad = timed(path, False, args.repeats)
            good, wall_good = timed(path, True, args.repeats)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"| {rule} | error: {str(e).splitlines()[-1] if str(e) else e!r} | | | |", flush=True)
            rows.append({"rule": rule, "error": str(e)})
            continue
        rows.append({"rule": rule, "inefficient_s": bad, "fixed_s": good, "achieved": bad / good})
        print(f"| {rule} | {bad:.3f} | {good:.3f} | {bad / good:.2f}x | {wall_bad:.0f} + {wall_good:.0f} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
