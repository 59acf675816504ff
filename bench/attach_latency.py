"""Attach to ready (issue #30): from `deepctx attach PID` issued to all probe families attached and the next
call counted, cold (the first capture after deepctxd starts) and warm (a second process of the same program,
after another one was captured).

    sudo .venv/bin/python bench/attach_latency.py [--runs 5] [--modes sampled,exact] [--json OUT]
                                                  [--daemon-log DIR] [--target cudart|torch|jax] [--gpu-activity]
                                                  [--no-prewarm] [--wait-prewarm]

GPU host, from the repository root:

    source tests/gpu/host.sh; python3 bench/attach_latency.py --target torch [--gpu-activity]

Each run and mode starts its own deepctxd (a private socket in a temp dir, JSON logs), then a target from
bench/targets/steady_calls.py that makes a probed call every --period seconds: cudart (the real libcudart of
pip's nvidia-cuda-runtime through ctypes; without a GPU the calls fail and the probes fire anyway), torch (an
MLP training step) or jax (a jitted step). The clock starts as the `deepctx attach` process is started. The
bench then asks the daemon for its sessions (the Status RPC, what `deepctx status --format json` shows) every
--poll seconds: the capture is ready at the first answer whose call count (--counters, summed) is above the
count of the first answer in state "capturing" (the daemon sets that state after every family attached), so a
call made after all families attached was counted. Resolution: about one poll plus one call period.
The capture is then ended (`deepctx stop`), the target exits, and the same is done for a second target
process on the same daemon (warm) before the daemon stops. The daemons share the configured on-disk cache of
unwind tables and compiled programs (/var/cache/deepctx), as a restarted daemon does; --fresh-cache gives each
an empty one (a first capture on a new host: on the H200, 3 to 6 s more for a PyTorch or JAX process; the
programs' code compiled); --no-program-cache keeps the unwind tables and compiles the programs (cache_programs
off). Each run prints how many programs its daemon loaded and how many of them came from disk.

The daemon compiles and loads its common programs as it starts (prewarm_programs): a cold attach issued at once
waits for the program it needs rather than compiling it again; --wait-prewarm issues it once they are loaded
(a daemon that has been up a while), --no-prewarm makes the first capture compile its own.

Per run, from the daemon's log (its "capture started" and "probes ready" lines):
  total      issued -> the next call counted
  cli        issued -> the daemon has the request (the CLI's start-up and connection, the access check)
  preparing  the request -> compiling: families chosen, interpreter found, unwind tables, symbols
  compile    compile_s of "probes ready": the BPF program taken (0 where a loaded one was there; waiting for
             one compiled ahead or given back included)
  attach     attach_s of "probes ready": every family attached
  to_count   "probes ready" -> the next call seen counted (the call period and the polling)
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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "bench" / "targets" / "steady_calls.py"
BUDGET_S = {"cold": 3.0, "warm": 1.0}  # issue #30, for the CI machine and for the H200 alike
PARTS = ("total", "cli", "preparing", "compile", "attach", "to_count")
DEFAULT_COUNTERS = "gpu_api_calls,device_correlations"  # uprobed calls; launches the CUPTI agent reports


# --- the daemon's log (pure: unit-tested in tests/unit/test_attach_latency.py) ---------------------------------

def log_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON objects of deepctxd's --log-format json output; other lines (a traceback, bcc's warnings) skipped."""
    out = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def capture_times(events: list[dict[str, Any]], pid: int) -> dict[str, Any]:
    """The daemon's side of one capture of pid: when it had the request ("capture started"), when every family
    was attached ("probes ready", with compile_s and attach_s) and the families. The last capture of pid wins;
    missing lines or fields come back as None (a changed engine may log no compile at all)."""
    started = ready = None
    for e in events:
        if e.get("pid") != pid:
            continue
        if e.get("msg") == "capture started":
            started, ready = e, None
        elif e.get("msg") == "probes ready":
            ready = e

    def num(e: dict[str, Any] | None, key: str) -> float | None:
        v = (e or {}).get(key)
        return float(v) if isinstance(v, (int, float)) else None

    return {"started_ts": num(started, "ts"), "ready_ts": num(ready, "ts"), "compile_s": num(ready, "compile_s"),
            "attach_s": num(ready, "attach_s"), "families": (ready or {}).get("families"),
            "attach_parts": (ready or {}).get("attach_parts")}


def breakdown(issued: float, counted: float, times: dict[str, Any]) -> dict[str, float | None]:
    """Where one attach's time went, in seconds (see the module's docstring); a part the log lacks is None.
    issued and counted are Unix times, like the log's ts."""
    started, ready = times["started_ts"], times["ready_ts"]
    compile_s, attach_s = times["compile_s"], times["attach_s"]
    out: dict[str, float | None] = {"total": counted - issued, "compile": compile_s, "attach": attach_s,
                                    "cli": started - issued if started is not None else None,
                                    "to_count": counted - ready if ready is not None else None, "preparing": None}
    if started is not None and ready is not None and compile_s is not None and attach_s is not None:
        out["preparing"] = ready - started - compile_s - attach_s
    return out


def spread(values: list[float | None]) -> tuple[float, float, float] | None:
    """(median, min, max) of the values that were measured; None when none was."""
    vs = [v for v in values if v is not None]
    return (statistics.median(vs), min(vs), max(vs)) if vs else None


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (mode, phase) of the measured rows: each part's median, min and max, the budget, and whether
    the median total is within it."""
    out = []
    for key in sorted({(r["mode"], r["phase"]) for r in rows if "total" in r}, key=lambda k: (k[0], k[1] != "cold")):
        rs = [r for r in rows if (r["mode"], r["phase"]) == key and "total" in r]
        line: dict[str, Any] = {"mode": key[0], "phase": key[1], "runs": len(rs), "budget_s": BUDGET_S[key[1]]}
        for part in PARTS:
            line[part] = spread([r[part] for r in rs])
        line["within_budget"] = line["total"][0] <= line["budget_s"]
        out.append(line)
    return out


def table(lines: list[dict[str, Any]]) -> str:
    """The summary as a Markdown table (seconds: median, min–max), the form BENCHMARKS.md records."""
    def cell(s: tuple[float, float, float] | None) -> str:
        return "–" if s is None else f"{s[0]:.2f} ({s[1]:.2f}–{s[2]:.2f})"

    head = "| mode | phase | runs | " + " | ".join(PARTS) + " | budget |\n"
    head += "| --- | --- | --- | " + " | ".join("---" for _ in PARTS) + " | --- |\n"
    return head + "".join(
        f"| {x['mode']} | {x['phase']} | {x['runs']} | " + " | ".join(cell(x[p]) for p in PARTS)
        + f" | ≤ {x['budget_s']:.1f} s {'(met)' if x['within_budget'] else '(missed)'} |\n" for x in lines)


# --- driving the daemon, the CLI and the targets -----------------------------------------------------------------

def cuda_runtime() -> str:
    import nvidia

    for base in nvidia.__path__:
        for lib in sorted(Path(base).glob("cu*/lib/libcudart.so.*")):
            return str(lib)
    raise SystemExit("pip package nvidia-cuda-runtime is not installed (./install.sh installs it)")


def target_argv(kind: str, period: float, python: str | None = None) -> list[str]:
    """python: the targets' interpreter (default this one), e.g. a virtualenv that has PyTorch."""
    python = python or sys.executable
    if kind != "cudart":
        module = kind.split("_", 1)[0]
        if subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode != 0:
            raise SystemExit(f"--target {kind}: {module} does not import in {python}")
    extra = [cuda_runtime()] if kind == "cudart" else []
    return [python, str(TARGET), kind, *extra, "--period", str(period)]


class Target:
    """A steady_calls.py process: ready once warmed up (it prints "ready <pid>"), ends when its stdin closes.
    wait: wait for that line here; else the caller does (ready()), the pid known from the start (argv runs
    the Python process itself, no wrapper)."""

    def __init__(self, argv: list[str], wait: bool = True) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        if wait:
            self.ready()

    def ready(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith(f"ready {self.pid}"):
            self.end()
            raise RuntimeError(f"target {self.argv} did not start: {line!r}")

    def end(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def status_poller(d: Any, how: str) -> Callable[[], dict[int, dict[str, Any]]]:
    """pid -> {"state", "stats"} of the daemon's sessions. "rpc": the Status RPC from this process (what
    `deepctx status` sends; a CLI process per poll would cost a core's fraction of a second on a 2-core machine,
    competing with the daemon it times); "cli": `deepctx status --format json`."""
    if how == "rpc":
        from deepctx.cli.client import connect
        from deepctx.proto.v1 import deepctx_pb2 as pb

        stub = connect(d.socket)

        def rpc() -> dict[int, dict[str, Any]]:
            reply = stub.Status(pb.StatusRequest(), timeout=30)
            return {s.pid: {"state": s.state, "stats": dict(s.stats)} for s in reply.sessions}

        return rpc

    def cli() -> dict[int, dict[str, Any]]:
        r = d.cli("status", "--format", "json")
        if r.returncode != 0:
            raise RuntimeError(f"deepctx status: {r.stderr.strip()}")
        return {s["pid"]: s for s in json.loads(r.stdout).get("sessions") or []}

    return cli


def wait_programs_loaded(d: Any, timeout_s: float = 600) -> None:
    """Until the daemon's programs compiled ahead are loaded (its Status totals: none pending, one idle)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = d.cli("status", "--format", "json")
        totals = json.loads(r.stdout).get("totals", {}) if r.returncode == 0 else {}
        if int(totals.get("bpf_programs_idle", 0)) >= 2:  # a Python process's programs, with and without a GPU
            return
        time.sleep(0.2)  # polling another process's state, with a deadline
    raise RuntimeError("the daemon's programs were not loaded in time")


def measure(d: Any, deepctx: list[str], argv: list[str], mode: str, phase: str, args: argparse.Namespace,
            poll: Callable[[], dict[int, dict[str, Any]]], work: Path) -> dict[str, Any]:
    """One attach: a fresh target, `deepctx attach` timed to the next call counted, then stopped and ended."""
    counters = args.counters.split(",")
    row: dict[str, Any] = {"mode": mode, "phase": phase, "target": args.target, "gpu_activity": args.gpu_activity}
    t = Target(argv)
    row["pid"] = t.pid
    attach_args = ["--mode", mode] + (["--gpu-activity"] if args.gpu_activity else [])
    err = open(work / f"attach-{t.pid}.err", "w+")  # noqa: SIM115 (closed below)
    attach: subprocess.Popen | None = None
    try:
        issued = time.time()
        attach = subprocess.Popen([*deepctx, "attach", str(t.pid), "--duration", "600", *attach_args, "--format",
                                   "json", "--quiet", "-o", os.devnull], env=d.env(), stdout=subprocess.DEVNULL,
                                  stderr=err)
        base: int | None = None
        counted = None
        deadline = time.monotonic() + args.timeout
        while counted is None:
            if attach.poll() is not None:
                err.seek(0)
                raise RuntimeError(f"deepctx attach {t.pid} ended ({attach.returncode}): {err.read().strip()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"deepctx attach {t.pid}: no call counted within {args.timeout} s")
            s = poll().get(t.pid)
            if s is not None and s["state"] == "capturing":
                n = sum(int(s["stats"].get(c, 0)) for c in counters)
                if base is None:
                    base = n
                elif n > base:
                    counted = time.time()
                    row["calls_at_ready"] = n
                    break
            time.sleep(args.poll)  # the poll period, against a deadline
        r = d.cli("stop", str(t.pid))
        if r.returncode != 0:
            raise RuntimeError(f"deepctx stop {t.pid}: {r.stderr.strip()}")
        attach.wait(timeout=300)  # the profile delivered: this program was captured
    finally:
        if attach is not None and attach.poll() is None:
            attach.kill()
            attach.wait()
        err.close()
        t.end()
    times = capture_times(log_events(d.log.read_text().splitlines()), row["pid"])
    row |= breakdown(issued, counted, times) | {"families": times["families"], "attach_parts": times["attach_parts"]}
    return row


def machine() -> dict[str, Any]:
    return {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "loadavg_at_start": os.getloadavg(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def fmt(v: float | None) -> str:
    return "    –" if v is None else f"{v:5.2f}"


def programs_loaded(log: Path) -> list[bool]:
    """Each program the daemon loaded, in order: whether its code came from the disk cache."""
    out = []
    for line in log.read_text().splitlines():
        if '"program loaded"' in line:
            try:
                out.append(bool(json.loads(line).get("from_disk")))
            except ValueError:
                continue
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="cold and warm attaches per mode (a daemon each)")
    ap.add_argument("--modes", default="sampled,exact", help="GPU call modes, comma-separated")
    ap.add_argument("--gpu-activity", action="store_true",
                    help="attach with device activity (the CUPTI agent): only where the host has a GPU")
    ap.add_argument("--target", choices=["cudart", "torch", "jax"], default="cudart")
    ap.add_argument("--period", type=float, default=0.002, help="seconds between the target's calls or steps")
    ap.add_argument("--poll", type=float, default=0.01, help="seconds between looks at the daemon's sessions")
    ap.add_argument("--status", choices=["rpc", "cli"], default="rpc", help="how the sessions are read")
    ap.add_argument("--counters", default=DEFAULT_COUNTERS, help="live stats whose sum is the call count")
    ap.add_argument("--timeout", type=float, default=300, help="seconds an attach may take before it is a failure")
    ap.add_argument("--json", metavar="OUT", help="write the machine, the arguments and every run's figures")
    ap.add_argument("--daemon-log", metavar="DIR", help="keep each daemon's JSON log there")
    ap.add_argument("--fresh-cache", action="store_true",
                    help="each daemon gets an empty unwind-table cache (cache_dir in its temp dir): a first capture "
                         "on a new host; by default the daemons share the configured one, as a restarted daemon does; "
                         "the compiled programs' cache is in it too")
    ap.add_argument("--program-cache", action=argparse.BooleanOptionalAction, default=True,
                    help="the daemon keeps its compiled programs' code on disk (cache_programs, its default): a "
                         "daemon after the first loads them with only their maps compiled; --no-program-cache: "
                         "every daemon compiles them")
    ap.add_argument("--prewarm", action=argparse.BooleanOptionalAction, default=True,
                    help="the daemon compiles and loads its common programs as it starts (its default; "
                         "--no-prewarm: each program when a capture first needs it)")
    ap.add_argument("--wait-prewarm", action="store_true",
                    help="the cold attach waits until the daemon's programs are loaded (a daemon that has been "
                         "up a while); by default it is issued as soon as the daemon serves and the target is ready")
    ap.add_argument("--self-profile", action="store_true",
                    help="with --daemon-log: each daemon samples its own threads' stacks (DEEPCTX_SELF_PROFILE) into "
                         "DIR/self-RUN-MODE.folded, to see where the attach's time goes (it competes for the GIL: "
                         "the times are then no figures)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (deepctxd loads BPF programs)")
    sys.path.insert(0, str(REPO / "tests"))
    from harness import DEEPCTX, start_daemon, stop_daemon

    # a SIGTERM to the bench still ends the daemons and targets it started (the finally blocks run)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    argv = target_argv(args.target, args.period)
    modes = args.modes.split(",")
    log_dir = Path(args.daemon_log) if args.daemon_log else None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    info = machine()
    print(f"# {info['host']}, {info['cpus']} CPUs, kernel {info['kernel']}, load {info['loadavg_at_start']}, "
          f"target {args.target}", flush=True)
    rows: list[dict[str, Any]] = []
    for run in range(args.runs):
        for mode in modes:  # modes alternate within a run: load that drifts hits each alike
            work = Path(tempfile.mkdtemp(prefix="deepctx-attach-"))
            t0 = time.monotonic()
            env = ({"DEEPCTX_SELF_PROFILE": str((log_dir / f"self-{run}-{mode}.folded").resolve())}
                   if args.self_profile and log_dir is not None else None)
            extra: list[str] = ["--prewarm" if args.prewarm else "--no-prewarm"]
            config = (f'cache_dir = "{work / "cache"}"\n' if args.fresh_cache else "") + (
                "" if args.program_cache else "cache_programs = false\n")
            if config:
                (work / "d.toml").write_text(config)
                extra += ["--config", str(work / "d.toml")]
            d = start_daemon(work, *extra, env=env)
            daemon_start_s = time.monotonic() - t0
            try:
                poll = status_poller(d, args.status)
                if args.prewarm and args.wait_prewarm:
                    wait_programs_loaded(d)
                for phase in ("cold", "warm"):
                    try:
                        row = measure(d, DEEPCTX, argv, mode, phase, args, poll, work)
                    except RuntimeError as e:
                        row = {"mode": mode, "phase": phase, "target": args.target, "error": str(e)}
                    row |= {"run": run, "daemon_start_s": daemon_start_s, "loadavg": os.getloadavg()[0]}
                    rows.append(row)
                    if "error" in row:
                        print(f"run {run} {mode:7} {phase}: FAILED {row['error']}", flush=True)
                    else:
                        print(f"run {run} {mode:7} {phase}: " + " ".join(f"{p} {fmt(row[p])}" for p in PARTS)
                              + f"  families {','.join(row['families'] or [])}"
                              + f"  attach {row['attach_parts'] or {}}", flush=True)
            finally:
                stop_daemon(d)
                loaded = programs_loaded(d.log)
                print(f"run {run} {mode:7} programs: {len(loaded)} loaded, {sum(loaded)} of them from disk "
                      f"(their code not compiled)", flush=True)
                for row in rows:
                    if row.get("run") == run and row.get("mode") == mode:
                        row["programs_from_disk"] = sum(loaded)
                if log_dir is not None:
                    shutil.copy(d.log, log_dir / f"daemon-{run}-{mode}.log")
                shutil.rmtree(work, ignore_errors=True)
    lines = summary(rows)
    print("\nseconds: median (min–max)\n" + table(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "args": vars(args), "runs": rows, "summary": lines},
                                              indent=1))
    return 0 if lines and all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
