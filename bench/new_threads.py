"""Python frames on threads that live a fifth of a second, deepctx against py-spy on the same process (issue
#35.1).

    sudo .venv/bin/python bench/new_threads.py [--rounds 3] [--duration 5] [--life 0.2] [--python PATH]
                                               [--py-spy PATH] [--json OUT]

One target (tests/targets/python/short_threads.py on --python, this Python by default) starts a thread, lets it
spin in Python for --life seconds, joins it and starts the next. One deepctxd (a private socket) with its
programs loaded. Each round, one after the other on the same target and at the same rate: `deepctx attach PID
--duration D --format json` and `py-spy record --pid PID --duration D --format speedscope`.

For each, of the samples of the short threads (deepctx: every thread but the main one; py-spy records only
threads running Python, and the main one waits in join): how many hold the thread's function (`short_worker`).
deepctx also says how many were marked [Python frames missing] (the thread ran Python code and the walker had
no stack) and how many ran no Python code (a thread's start and end in C, which py-spy does not see).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from profile_paths import self_paths  # noqa: E402

TARGET = REPO / "tests" / "targets" / "python" / "short_threads.py"
WORKER = "short_worker"
THREAD_NAME = "short"  # threading's name of the target's threads
MISSING = "[Python frames missing]"


# --- counting (pure: tests/unit/test_bench_new_threads.py) -------------------------------------------------

def deepctx_counts(doc: dict[str, Any], main_tid: int) -> dict[str, int]:
    """Samples of the threads other than main_tid: all, with the worker's frame, marked missing, with no Python
    frame; and those threads, and how many of them carry threading's name (`... (short)`)."""
    out = {"samples": 0, "worker": 0, "missing": 0, "outside_python": 0}
    for path, n in self_paths(doc):
        if path[0].get("kind") != "thread" or path[0].get("tid") == main_tid:
            continue
        python = [f["name"] for f in path if f.get("kind") == "python"]
        out["samples"] += n
        out["worker"] += n * (WORKER in python)
        out["missing"] += n * (MISSING in python)
        out["outside_python"] += n * (not python)
    threads = [c for c in doc["root"]["children"] if c.get("kind") == "thread" and c.get("tid") != main_tid]
    out["threads"] = len(threads)
    out["named"] = sum(1 for c in threads if c["name"].endswith(f"({THREAD_NAME})"))
    return out


def pyspy_counts(doc: dict[str, Any]) -> dict[str, int]:
    """py-spy's samples (speedscope: per thread, frame indices outermost first) that are not the main thread's
    (rooted at <module>): all, and with the worker's frame."""
    names = [f.get("name") for f in doc.get("shared", {}).get("frames", [])]
    out = {"samples": 0, "worker": 0}
    for prof in doc.get("profiles", []):
        for stack, weight in zip(prof.get("samples", []), prof.get("weights", []), strict=False):
            frames = [names[i] for i in stack]
            if frames and frames[0] == "<module>":
                continue
            n = int(weight) if prof.get("unit") == "none" else 1
            out["samples"] += n
            out["worker"] += n * (WORKER in frames)
    return out


def share(part: int, whole: int) -> float:
    return part / whole if whole else float("nan")


# --- driving -------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="captures by each profiler (default 3)")
    ap.add_argument("--duration", type=int, default=5, help="seconds per capture (default 5)")
    ap.add_argument("--rate", type=int, default=99, help="samples per second of both (default 99)")
    ap.add_argument("--life", type=float, default=0.2, help="seconds each thread lives (default 0.2)")
    ap.add_argument("--python", default=sys.executable, help="the target's interpreter (default: this one)")
    ap.add_argument("--py-spy", dest="pyspy", metavar="PATH", help="the py-spy executable")
    ap.add_argument("--json", metavar="OUT", help="write the machine, the arguments and every round's counts")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (deepctxd loads BPF programs; py-spy reads another process's memory)")
    sys.path.insert(0, str(REPO / "bench"))
    sys.path.insert(0, str(REPO / "tests"))
    from attach_latency import wait_programs_loaded
    from cpu_vs_pyspy import find_pyspy, timed_child, tree_cpu
    from harness import DEEPCTX, start_daemon, stop_daemon

    pyspy = find_pyspy(args.pyspy)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                             text=True, check=True).stdout.strip()
    info = {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(), "target_python": version,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "pyspy": subprocess.run([pyspy, "--version"], capture_output=True, text=True).stdout.strip()}
    print(f"# {info['host']}, {info['cpus']} CPUs, kernel {info['kernel']}, target Python {version}, {info['pyspy']}, "
          f"{args.rate} Hz, {args.duration} s captures, threads of {args.life} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="deepctx-new-threads-"))
    target = subprocess.Popen([args.python, str(TARGET), str(args.life)], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, DEEPCTX_TARGET_SECONDS=str(60 + 3 * args.rounds * args.duration)))
    d = None
    rows: list[dict[str, Any]] = []
    try:
        assert target.stdout is not None
        line = target.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"the target did not start: {line!r}")
        pid, main_tid = int(line.split()[1]), json.loads(line.split(None, 2)[2])["tid"]
        d = start_daemon(work, "--prewarm")
        wait_programs_loaded(d)
        for rnd in range(args.rounds):
            out = work / f"deepctx-{rnd}.json"
            err = open(work / f"attach-{rnd}.err", "w+")  # noqa: SIM115 (closed below)
            c0 = tree_cpu(d.proc.pid)
            rc, cli_s, _ = timed_child([*DEEPCTX, "attach", str(pid), "--duration", str(args.duration), "--rate",
                                        str(args.rate), "--format", "json", "--quiet", "-o", str(out)],
                                       env=d.env(), stderr=err, timeout=args.duration + 300)
            time.sleep(1.0)  # the capture's teardown, counted as cpu_vs_pyspy.py counts it (its --settle)
            daemon_s = tree_cpu(d.proc.pid) - c0
            err.seek(0)
            if rc != 0:
                raise RuntimeError(f"deepctx attach exited {rc}: {err.read().strip()}")
            err.close()
            dc = deepctx_counts(json.loads(out.read_text()), main_tid) | {"daemon_cpu_s": daemon_s, "cli_cpu_s": cli_s}
            sout = work / f"pyspy-{rnd}.json"
            r = subprocess.run([pyspy, "record", "--pid", str(pid), "--duration", str(args.duration), "--rate",
                                str(args.rate), "--format", "speedscope", "-o", str(sout)], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"py-spy record exited {r.returncode}: {r.stderr.strip()[-2000:]}")
            ps = pyspy_counts(json.loads(sout.read_text()))
            row = {"round": rnd + 1, "deepctx": dc, "pyspy": ps,
                   "deepctx_share": share(dc["worker"], dc["samples"]), "pyspy_share": share(ps["worker"], ps["samples"])}
            rows.append(row)
            print(f"round {rnd + 1}: deepctx {dc['worker']}/{dc['samples']} ({100 * row['deepctx_share']:.1f}%; "
                  f"{dc['missing']} marked missing, {dc['outside_python']} outside Python; threads named "
                  f"{dc['named']}/{dc['threads']}; deepctxd {daemon_s:.2f} + CLI {cli_s:.2f} CPU-s)  py-spy "
                  f"{ps['worker']}/{ps['samples']} ({100 * row['pyspy_share']:.1f}%)", flush=True)
    finally:
        target.kill()
        target.wait()
        if d is not None:
            stop_daemon(d)
    med = {k: statistics.median(r[k] for r in rows) for k in ("deepctx_share", "pyspy_share")}
    print(f"\nmedian share of the short threads' samples in {WORKER}: deepctx {100 * med['deepctx_share']:.1f}%, "
          f"py-spy {100 * med['pyspy_share']:.1f}%")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "args": vars(args), "rounds": rows, "medians": med},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
