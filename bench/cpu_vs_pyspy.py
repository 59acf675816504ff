"""The CPU one capture costs, deepctx against py-spy on the same process (issue #35.7).

    sudo .venv/bin/python bench/cpu_vs_pyspy.py [--rounds 3] [--duration 20] [--py-spy PATH] [--json OUT]
                                                [--target mix|threads] [--self-profile DIR]

Starts one CPU-bound Python target (bench/targets/stdlib_mix.py: the standard library's pure-Python modules
on --threads threads, 2 by default; or --target threads: bench/targets/python_threads.py's four threads of one loop) and one
deepctxd (a private socket in a temp dir, programs compiled ahead as by default), and waits until the daemon's
programs are loaded. Then, each round, one after the other on the same target:

  deepctx  `deepctx attach PID --duration D --format json -o FILE` (CPU sampling, the attach default, at the
           daemon's default rate): the daemon's CPU (utime+stime of /proc/PID/stat, its reaped and live
           children's included) from just before the CLI starts to --settle seconds after it exits (the
           capture's teardown counted), and the CLI's own (os.wait4's rusage).
  py-spy   `py-spy record --pid PID --duration D --rate HZ --format speedscope -o FILE` at the same rate
           (py-spy's defaults otherwise: it pauses the target for each sample, Python frames only): its CPU
           (os.wait4's rusage).

The daemon's compile of its programs (prewarm, at start) is paid once per daemon start, not per capture: it
is reported apart (the daemon's CPU from its start to its programs loaded, start-up and imports included),
as is the daemon's idle CPU (a quiet stretch before the first round), which the capture figures include.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
TARGETS = {
    "mix": [str(REPO / "bench" / "targets" / "stdlib_mix.py")],
    # python_threads.py runs ROUNDS of work after a line on stdin: enough for the whole bench
    "threads": [str(REPO / "bench" / "targets" / "python_threads.py"), str(10**9)],
}


# --- CPU seconds (pure where they can be: unit-tested in tests/unit/test_cpu_vs_pyspy.py) ------------------

def stat_cpu(stat: str) -> tuple[float, float, int]:
    """(own CPU-s, reaped children's CPU-s, ppid) of a /proc/PID/stat line: utime+stime, cutime+cstime."""
    fields = stat.rsplit(")", 1)[1].split()  # the name may hold spaces and parentheses
    ppid = int(fields[1])
    own = (int(fields[11]) + int(fields[12])) / TICK
    children = (int(fields[13]) + int(fields[14])) / TICK
    return own, children, ppid


def tree_cpu(pid: int, proc: Path = Path("/proc")) -> float:
    """CPU-s of pid, of the children it reaped, and of its live descendants (their own reaped ones included)."""
    stats: dict[int, tuple[float, float, int]] = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stats[int(d.name)] = stat_cpu((d / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    if pid not in stats:
        raise RuntimeError(f"process {pid} is gone")
    kids: dict[int, list[int]] = {}
    for p, (_, _, ppid) in stats.items():
        kids.setdefault(ppid, []).append(p)
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        own, reaped, _ = stats[p]
        total += own + reaped
        todo.extend(kids.get(p, []))
    return total


def rusage_cpu(ru: Any) -> float:
    return float(ru.ru_utime + ru.ru_stime)


def timed_child(argv: list[str], env: dict[str, str] | None = None, stderr: Any = subprocess.DEVNULL,
                timeout: float = 600) -> tuple[int, float, float]:
    """Runs argv to its end: (exit status, its CPU-s and its reaped children's, wall seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = t0 + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            break
        time.sleep(0.05)  # polling the child's end, against a deadline
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return p.returncode, rusage_cpu(ru), time.monotonic() - t0


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over the rounds (never the best), and the ratio of the medians."""
    keys = ("daemon_cpu_s", "cli_cpu_s", "deepctx_cpu_s", "pyspy_cpu_s", "ratio")
    out = {k: statistics.median(r[k] for r in rows) for k in keys}
    out["ratio_of_medians"] = out["deepctx_cpu_s"] / out["pyspy_cpu_s"]
    return out


def table(rows: list[dict[str, Any]], med: dict[str, float]) -> str:
    head = ("| round | deepctxd CPU-s | CLI CPU-s | deepctx total | py-spy CPU-s | deepctx / py-spy | samples "
            "(deepctx / py-spy) |\n| --- | --- | --- | --- | --- | --- | --- |\n")
    body = "".join(f"| {r['round'] + 1} | {r['daemon_cpu_s']:.2f} | {r['cli_cpu_s']:.2f} | {r['deepctx_cpu_s']:.2f} "
                   f"| {r['pyspy_cpu_s']:.2f} | {r['ratio']:.2f}× | {r.get('deepctx_samples', '–')} / "
                   f"{r.get('pyspy_samples', '–')} |\n" for r in rows)
    return head + body + (f"| median | {med['daemon_cpu_s']:.2f} | {med['cli_cpu_s']:.2f} | {med['deepctx_cpu_s']:.2f} "
                          f"| {med['pyspy_cpu_s']:.2f} | {med['ratio']:.2f}× | |\n")


def deepctx_samples(path: Path) -> int | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    n = (doc.get("stats") or {}).get("cpu_samples")
    return int(n) if isinstance(n, (int, float)) else None


def pyspy_samples(path: Path) -> int | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return sum(len(p.get("samples") or []) for p in doc.get("profiles") or [])


# --- driving -------------------------------------------------------------------------------------------

def default_rate() -> int:
    from deepctx.daemon.config import Config

    return int(Config().default_sample_hz)


def find_pyspy(given: str | None) -> str:
    path = given or shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise SystemExit(f"py-spy not found ({path}): `pip install py-spy` (into this venv or another) and pass "
                         "--py-spy PATH")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="captures by each profiler (default 3)")
    ap.add_argument("--duration", type=int, default=20, help="seconds per capture (default 20)")
    ap.add_argument("--rate", type=int, help="samples per second of both (default: the daemon's default_sample_hz)")
    ap.add_argument("--py-spy", dest="pyspy", metavar="PATH", help="the py-spy executable (default: on PATH or "
                    "beside this Python)")
    ap.add_argument("--target", choices=sorted(TARGETS), default="mix")
    ap.add_argument("--threads", type=int, default=2, help="--target mix: its working threads (default 2)")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds after the CLI exits still counted as the daemon's (the capture's teardown)")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of the daemon's idle CPU measured first")
    ap.add_argument("--json", metavar="OUT", help="write the machine, the arguments and every round's figures")
    ap.add_argument("--self-profile", metavar="DIR",
                    help="the daemon samples its own threads' stacks (DEEPCTX_SELF_PROFILE) into DIR/self.folded "
                         "and keeps its log there: where its CPU goes (the sampler costs CPU: no figures then)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (deepctxd loads BPF programs; py-spy reads another process's memory)")
    pyspy = find_pyspy(args.pyspy)
    rate = args.rate or default_rate()
    sys.path.insert(0, str(REPO / "tests"))
    from harness import DEEPCTX, start_daemon, stop_daemon

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally blocks end what was started
    info = {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "loadavg_at_start": os.getloadavg(), "rate_hz": rate,
            "pyspy": subprocess.run([pyspy, "--version"], capture_output=True, text=True).stdout.strip()}
    print(f"# {info['host']}, {info['cpus']} CPUs, kernel {info['kernel']}, Python {info['python']}, "
          f"load {info['loadavg_at_start']}, {info['pyspy']}, {rate} Hz, {args.duration} s captures", flush=True)
    work = Path(tempfile.mkdtemp(prefix="deepctx-vs-pyspy-"))
    extra = ["--threads", str(args.threads)] if args.target == "mix" else []
    target = subprocess.Popen([sys.executable, *TARGETS[args.target], *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    d = None
    rows: list[dict[str, Any]] = []
    try:
        assert target.stdout is not None and target.stdin is not None
        line = target.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"the target did not start: {line!r}")
        pid = int(line.split()[1])
        if args.target == "threads":
            target.stdin.write("go\n")
            target.stdin.flush()
        env = None
        if args.self_profile:
            Path(args.self_profile).mkdir(parents=True, exist_ok=True)
            env = {"DEEPCTX_SELF_PROFILE": str((Path(args.self_profile) / "self.folded").resolve())}
        t0 = time.monotonic()
        d = start_daemon(work, "--prewarm", env=env)
        sys.path.insert(0, str(REPO / "bench"))
        from attach_latency import wait_programs_loaded

        wait_programs_loaded(d)
        prewarm = {"cpu_s": tree_cpu(d.proc.pid), "wall_s": time.monotonic() - t0}
        c0 = tree_cpu(d.proc.pid)
        time.sleep(args.idle)
        idle_share = (tree_cpu(d.proc.pid) - c0) / args.idle
        print(f"daemon start to programs loaded: {prewarm['cpu_s']:.2f} CPU-s in {prewarm['wall_s']:.1f} s "
              f"(once per daemon start, not per capture); idle: {100 * idle_share:.2f}% of a core", flush=True)
        for rnd in range(args.rounds):
            row: dict[str, Any] = {"round": rnd, "loadavg": os.getloadavg()[0]}
            out = work / f"deepctx-{rnd}.json"
            err = open(work / f"attach-{rnd}.err", "w+")  # noqa: SIM115 (closed below)
            c0 = tree_cpu(d.proc.pid)
            rc, cli_s, wall = timed_child([*DEEPCTX, "attach", str(pid), "--duration", str(args.duration), "--rate",
                                           str(rate), "--format", "json", "--quiet", "-o", str(out)], env=d.env(),
                                          stderr=err, timeout=args.duration + 300)
            time.sleep(args.settle)
            row["daemon_cpu_s"] = tree_cpu(d.proc.pid) - c0
            err.seek(0)
            if rc != 0:
                raise RuntimeError(f"deepctx attach {pid} exited {rc}: {err.read().strip()}")
            err.close()
            row |= {"cli_cpu_s": cli_s, "deepctx_wall_s": wall, "deepctx_samples": deepctx_samples(out),
                    "deepctx_bytes": out.stat().st_size}
            row["deepctx_cpu_s"] = row["daemon_cpu_s"] + row["cli_cpu_s"]
            sout = work / f"pyspy-{rnd}.json"
            perr = open(work / f"pyspy-{rnd}.err", "w+")  # noqa: SIM115 (closed below)
            rc, spy_s, wall = timed_child([pyspy, "record", "--pid", str(pid), "--duration", str(args.duration),
                                           "--rate", str(rate), "--format", "speedscope", "-o", str(sout)],
                                          stderr=perr, timeout=args.duration + 300)
            perr.seek(0)
            if rc != 0:
                raise RuntimeError(f"py-spy record exited {rc}: {perr.read().strip()[-2000:]}")
            perr.close()
            row |= {"pyspy_cpu_s": spy_s, "pyspy_wall_s": wall, "pyspy_samples": pyspy_samples(sout),
                    "pyspy_bytes": sout.stat().st_size}
            row["ratio"] = row["deepctx_cpu_s"] / row["pyspy_cpu_s"]
            rows.append(row)
            print(f"round {rnd + 1}: deepctxd {row['daemon_cpu_s']:.2f} + CLI {row['cli_cpu_s']:.2f} = "
                  f"{row['deepctx_cpu_s']:.2f} CPU-s ({row['deepctx_samples']} samples)  py-spy "
                  f"{row['pyspy_cpu_s']:.2f} CPU-s ({row['pyspy_samples']} samples)  ratio {row['ratio']:.2f}  "
                  f"load {row['loadavg']:.1f}", flush=True)
    finally:
        if target.stdin is not None and not target.stdin.closed:
            target.stdin.close()
        if args.target == "threads":
            target.kill()
        try:
            target.wait(timeout=30)
        except subprocess.TimeoutExpired:
            target.kill()
            target.wait()
        if d is not None:
            stop_daemon(d)
            if args.self_profile:
                shutil.copy(d.log, Path(args.self_profile) / "deepctxd.log")
        shutil.rmtree(work, ignore_errors=True)
    med = summary(rows)
    print(f"\nCPU-s per {args.duration} s capture at {rate} Hz, rounds and medians\n" + table(rows, med))
    budget_met = med["deepctx_cpu_s"] <= med["pyspy_cpu_s"]
    print(f"budget (deepctx's CPU at most py-spy's, medians): {'met' if budget_met else 'missed'} "
          f"({med['deepctx_cpu_s']:.2f} against {med['pyspy_cpu_s']:.2f} CPU-s); the daemon's prewarm compile "
          f"({prewarm['cpu_s']:.2f} CPU-s) is paid once per daemon start, not per capture")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "args": vars(args), "prewarm": prewarm,
                                               "idle_core_share": idle_share, "rounds": rows, "medians": med,
                                               "budget_met": budget_met}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
