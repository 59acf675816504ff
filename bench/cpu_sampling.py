"""CPU-sampling overhead, side by side in one run: a fixed-work target alone and under deepctx.

    sudo .venv/bin/python bench/cpu_sampling.py [--target native|python4] [--rates 99,999] [--rounds N] [--repeat 3]

native: tests/targets/bin/cpu_burner (C, frame pointers); python4: bench/targets/python_threads.py, four
Python threads (Python frames walked in BPF, native stacks by the .eh_frame unwinder).

Reports, per sampling rate: the target's slowdown (time with deepctx / time alone; the BPF program runs
on the sampled CPU, so its cost shows here) and the daemon's CPU (share of one core over the capture).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


TARGETS = {
    "native": lambda rounds: [str(REPO / "tests/targets/bin/cpu_burner"), "work", str(rounds)],
    "python4": lambda rounds: [sys.executable, str(REPO / "bench/targets/python_threads.py"), str(rounds)],
}


def run_target(argv: list[str], on_ready=None, on_done=None) -> float:  # noqa: ANN001
    """Runs the target's timed work once; on_ready(pid) runs before the work starts."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdin is not None
    pid = int(p.stdout.readline().split()[1])
    if on_ready:
        on_ready(pid)
    p.stdin.write("go\n")
    p.stdin.flush()
    done = p.stdout.readline().split()
    if on_done:
        on_done()
    p.wait()
    return float(done[1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", choices=sorted(TARGETS), default="native")
    ap.add_argument("--rates", default="99,999")
    ap.add_argument("--rounds", type=int, default=0, help="work per run (default: native 80000, python4 100000: a few seconds each)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    argv = TARGETS[args.target](args.rounds or (80000 if args.target == "native" else 100000))
    subprocess.run(["make", "-s", "-C", str(REPO / "tests/targets")], check=True)
    tmp = tempfile.mkdtemp(prefix="deepctx-bench-")
    sock = os.path.join(tmp, "d.sock")
    env = dict(os.environ, DEEPCTX_SOCKET=sock)
    daemon = subprocess.Popen([str(BIN / "deepctxd"), "--foreground", "--log-level", "warning"], env=env)
    results = []
    try:
        subprocess.run([str(BIN / "deepctx"), "status", "--wait", "30"], env=env, check=True, stdout=subprocess.DEVNULL)
        for rate in [int(r) for r in args.rates.split(",")]:
            base, prof, daemon_core, samples = [], [], [], []
            for _ in range(args.repeat):
                base.append(run_target(argv))
                box: dict = {}

                def attach(pid: int, rate: int = rate, box: dict = box) -> None:
                    def go() -> None:
                        r = subprocess.run([str(BIN / "deepctx"), "attach", str(pid), "--duration", "3600", "--rate",
                                            str(rate), "--format", "json", "--quiet"], env=env, capture_output=True,
                                           text=True)
                        box["doc"] = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr}

                    box["thread"] = threading.Thread(target=go)
                    box["thread"].start()
                    # wait until the capture runs before letting the measured work start counting
                    deadline = time.monotonic() + 30
                    while True:  # a run the profiler never attached to is no profiled run
                        st = subprocess.run([str(BIN / "deepctx"), "status", "--format", "json"], env=env,
                                            capture_output=True, text=True)
                        if '"capturing"' in st.stdout:
                            break
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"deepctx did not attach: {box.get('doc')}")
                        time.sleep(0.02)
                    # steady state starts now: the daemon's CPU is measured from here to the target's end
                    box["c0"], box["t0"] = cpu_seconds(daemon.pid), time.monotonic()

                def finished(box: dict = box) -> None:
                    box["c1"], box["t1"] = cpu_seconds(daemon.pid), time.monotonic()

                prof.append(run_target(argv, on_ready=attach, on_done=finished))
                box["thread"].join()
                doc = box["doc"]
                n = doc.get("stats", {}).get("cpu_samples", 0)
                samples.append(n)
                daemon_core.append((box["c1"] - box["c0"]) / (box["t1"] - box["t0"]))
            row = {
                "rate_hz": rate,
                "target_alone_s": statistics.median(base),
                "target_profiled_s": statistics.median(prof),
                "slowdown": statistics.median(prof) / statistics.median(base),
                "daemon_core_share": statistics.median(daemon_core),
                "samples": statistics.median(samples),
            }
            results.append(row)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    print(f"{'rate':>6} {'alone s':>8} {'profiled s':>10} {'slowdown':>9} {'daemon CPU':>11} {'samples':>8}")
    for r in results:
        print(f"{r['rate_hz']:>5}Hz {r['target_alone_s']:>8.3f} {r['target_profiled_s']:>10.3f} {r['slowdown']:>8.3f}x "
              f"{100 * r['daemon_core_share']:>9.2f}% {r['samples']:>8.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
