"""Continuous mode's GPU times on a real GPU: ResNet-50 training (started with the CUPTI agent) under a
continuous daemon, whose windows record device activity for the first `continuous_gpu_duty` of each 10 s
window only (0.2 s by default) and scale it up to the window (daemon/busy_meter.py: by the GPU's busy time).
The merged windows' GPU time per step, set against the job's own steps over the same stretch, is compared
with a full capture's.

    sudo python3 bench/gpu_continuous_scaling.py OUT_DIR [--seconds 45] [--duty 0.02] [--python python3]

Writes OUT_DIR/daemon.log (debug: each window's "GPU busy fit"), OUT_DIR/steps.txt (every step's end,
monotonic), OUT_DIR/profile.json (the merged windows) and prints each window (its share's records, the GPU
ms per step its share gives scaled by busy time and by time, its busy fit) and the merged profile's GPU ms
per step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from continuous_overhead import ContinuousDaemon, wait_captured  # noqa: E402
from duty_shares import Steps  # noqa: E402
from gpu_overhead import AGENT, doc_nodes  # noqa: E402
from marks import start_marked  # noqa: E402


def stored_profile(daemon: ContinuousDaemon, pid: int) -> dict:
    """The target's merged windows, once its capture has ended with it (its last window, cut by the exit,
    stored then; waited for, 30 s at most)."""
    deadline = time.monotonic() + 30
    while daemon.capturing(pid) and time.monotonic() < deadline:
        time.sleep(0.5)  # polling the daemon's status, with a deadline
    r = subprocess.run(daemon.cli + ["profile", "--pid", str(pid), "--since", "10m", "--format", "json"],
                       env=daemon.env, capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}


def windows(log: Path, steps: Steps, pid: int) -> list[dict]:
    """Prints each window of process pid from the daemon's debug log (its share, then its busy fit); its fits."""
    fits, share = [], None
    for line in log.read_text().splitlines():  # each window's share (one a window), then its fit
        if '"device share"' in line or '"GPU busy fit"' in line:
            d = json.loads(line)
            if d.get("pid") != pid:
                continue
            if d["msg"] == "device share":
                share = d
                continue
            fits.append(d)
            w0, w1 = d["window_mono"]
            n = steps.between(w0, w1)
            rec, dev = (share or {}).get("first_record_to_flush_s", 0.0), (share or {}).get("device_ms", 0.0)
            rate = d.get("gpu_busy_recording_permille")
            by_busy = f"{dev * d['gpu_busy_ms'] / (rate * rec) / n:.2f}" if rate and rec and n else "-"
            by_time = f"{dev * (w1 - w0) / rec / n:.2f}" if rec and n else "-"
            print(f"window {w0:10.3f} to {w1:10.3f} ({w1 - w0:5.2f} s, {n:6.1f} steps): share "
                  f"{(share or {}).get('records', 0)} records in {rec:.3f} s; GPU ms/step by busy time {by_busy}, "
                  f"by time {by_time}; { {k: v for k, v in d.items() if k.startswith('gpu_busy')} } "
                  f"{d.get('why') or ''}")
            share = None
    return fits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=45.0, help="how long the job runs once captured")
    ap.add_argument("--duty", type=float, default=None, help="continuous_gpu_duty (default: the daemon's)")
    ap.add_argument("--workload", default="resnet50", help="bench/workloads.py's (mock_launch: on the mocks)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--deepctx", default="deepctx")
    ap.add_argument("--deepctxd", default="deepctxd")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log, steps_file = args.out / "daemon.log", args.out / "steps.txt"
    daemon = ContinuousDaemon(args.deepctx.split(), args.deepctxd.split(), args.duty, log=log, level="debug")
    try:
        p, pid = start_marked(args.workload, args.python, dict(os.environ) | {"CUDA_INJECTION64_PATH": str(AGENT)},
                              extra=["--step-times", str(steps_file)])
        wait_captured(daemon, [pid])
        time.sleep(args.seconds)  # the job runs: the windows are cut meanwhile
        assert p.stdin is not None
        p.stdin.close()
        p.wait(timeout=120)
        doc = stored_profile(daemon, pid)
    finally:
        daemon.stop()
    (args.out / "profile.json").write_text(json.dumps(doc))
    steps = Steps([float(x) for x in steps_file.read_text().split()])
    fits = windows(log, steps, pid)
    stats = doc.get("stats") or {}
    if not fits or not stats:
        print("no windows stored")
        return 1
    t0, t1 = fits[0]["window_mono"][0], fits[-1]["window_mono"][1]
    n = steps.between(t0, t1)
    gpu_ms = sum(nd["metrics"].get("gpu_time_ns", 0) for nd in doc_nodes(doc)) / 1e6
    by_time = stats.get("device_time_ns", 0) / 1e6 * 1000 * (t1 - t0) / max(stats.get("device_recorded_ms", 0), 1)
    print(f"{len(fits)} windows, {t1 - t0:.2f} s, {n:.1f} steps; GPU ms/step: by busy time (the profile) "
          f"{gpu_ms / n:.2f}, by time {by_time / n:.2f}; device_records {stats.get('device_records')}, "
          f"gpu_busy_scaled_permille {stats.get('gpu_busy_scaled_permille')}, device_busy_scaled_permille "
          f"{stats.get('device_busy_scaled_permille')}; warnings {doc.get('warnings')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
