"""Where a continuous deepctxd spends its CPU while it watches one workload (diagnostics, not a ratio).

    sudo python3 bench/daemon_self_profile.py --workload resnet50 --steps 1200 --out self.folded

Starts `deepctxd --continuous` with DEEPCTX_SELF_PROFILE (daemon/self_profile.py), starts the workload
(bench/workloads.py), waits until the daemon captures it, runs the steps and prints the daemon's CPU share
every 5 seconds; the daemon writes its threads' running stacks (folded) to --out when it stops."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from continuous_overhead import ContinuousDaemon, start, timed  # noqa: E402
from gpu_overhead import cpu_s, rss_mb  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="resnet50")
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--deepctx", default="deepctx")
    ap.add_argument("--deepctxd", default="deepctxd")
    ap.add_argument("--gpu-duty", type=float)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ["DEEPCTX_SELF_PROFILE"] = str(Path(args.out).resolve())
    daemon = ContinuousDaemon(args.deepctx.split(), args.deepctxd.split(), args.gpu_duty)
    try:
        proc, pid = start(args.workload, args.python, args.steps)
        t0 = time.monotonic()
        while not daemon.capturing(pid):
            assert time.monotonic() - t0 < 60, "the continuous daemon did not pick the workload up"
            time.sleep(0.2)
        print(f"captured after {time.monotonic() - t0:.1f} s", flush=True)
        done = threading.Event()
        steps = threading.Thread(target=lambda: (timed([proc]), done.set()), daemon=True)
        c, t = cpu_s(daemon.proc.pid), time.monotonic()
        steps.start()
        while not done.wait(5):
            c2, t2 = cpu_s(daemon.proc.pid), time.monotonic()
            print(f"daemon CPU {100 * (c2 - c) / (t2 - t):5.1f}%  RSS {rss_mb(daemon.proc.pid):.0f} MB  "
                  f"windows {daemon.windows()}", flush=True)
            c, t = c2, t2
    finally:
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
