"""Continuous mode: the daemon's CPU for each newly found process (issue #30: at most 0.3 CPU-seconds each).

    sudo .venv/bin/python bench/continuous_new_process.py [--processes 5] [--settle 3] [--baseline 6]
        [--libcudart PATH] [--keep] [--shared-cache] [--prewarm-unwind-files N] [--prewarm-symbol-files N]
        [--json OUT] [--daemon-log DIR] [--self-profile FILE]

Starts `deepctxd --continuous` at its default continuous settings (a private socket, window store and unwind
cache in a temp dir; --shared-cache: the configured cache_dir, as a restarted daemon has), waits until it
serves, the programs it compiles ahead are loaded (its Status totals: bpf_programs_idle, as
bench/attach_latency.py --wait-prewarm) and its prewarm of the recently used files' unwind rows has ended
(unwind_prewarm_done; with --shared-cache it places the rows of the files earlier daemons' captures used:
prewarm_unwind_files, which --prewarm-unwind-files sets, 0 turning it off; its time and CPU are printed) and
its build of the symbol tables those captures asked for (symbol_prewarm_done: prewarm_symbol_files,
--prewarm-symbol-files), then
starts --processes new GPU processes one at a time:
bench/targets/steady_calls.py cudart, a Python process that loads the CUDA runtime through ctypes and calls
cudaLaunchKernel every --period seconds (the real libcudart of pip's nvidia-cuda-runtime: without a GPU each
call fails and the probes fire anyway; --libcudart names another, e.g. the mock tests/mocks/build/lib/
libcudart.so.13, which is the fallback when the pip package is missing).
--target torch_cpu (with --target-python, an interpreter that has PyTorch) starts PyTorch processes instead: a
CUDA build on the CPU, which loads libtorch_cuda.so and libcudart at import, as on a GPU host.

Per process:
  idle       before it starts, the daemon's CPU rate over --baseline seconds, while it captures nothing (or,
             with --keep, the earlier processes it still captures)
  span       from just before the process is started to its capture attached (the daemon's "probes ready"
             line for its pid, read from the daemon's JSON log: polling the log costs the daemon nothing,
             polling its Status would) plus --settle seconds
  cpu        the daemon's utime+stime over the span (/proc/PID/stat: every thread, live or exited), plus
             its children's (cutime+cstime: large unwind tables are built in a child process), in
             CPU-seconds, minus idle x span: what finding, preparing and attaching this process, and the
             capture's first --settle seconds, cost the daemon
The span includes the wait for the daemon's next scan (continuous_scan_s, default 2 s): its idle cost is what
the subtraction removes. With --keep, every capture on the shared program cuts its windows at the same
instants (continuous_window_s apart), so their builds come together once a window: a baseline or span
shorter than a window holds that burst or not, and the rows then rise with the processes kept. --baseline 10
--settle 9 (at the default 10 s windows) makes each hold one (BENCHMARKS.md, "Continuous captures share one
program"). After the span the capture is checked ("capturing" in Status), the process is ended
(stdin closed) and, unless --keep, its capture is waited for to end (its session gone, its program back in the
pool) before the next process starts, so each process is measured on an idle daemon.
Reported: a row per process, the median over all processes against the budget, and the first process apart
from the later ones, with the host-cache entries (host/file_cache.py: symbol tables, unwind tables,
interpreter layouts per file identity) each one built: the first builds them, the later ones of the same files
reuse them. A row whose baseline or span saw a capture of another process (another job's GPU process on a
shared host: the daemon watches every GPU process of the host) is marked and left out of the medians, and
another process is measured in its place (at most --retries); a first process left out has no figure (run
again: its host-cache builds may then have been made for the other process).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attach_latency import Target, cuda_runtime, log_events, target_argv  # noqa: E402

from deepctx.host.file_cache_status import STATUS_PREFIX as CACHE_PREFIX  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "bench" / "targets" / "steady_calls.py"
MOCK_CUDART = REPO / "tests" / "mocks" / "build" / "lib" / "libcudart.so.13"
BUDGET_S = 0.3  # issue #30: CPU-seconds of the daemon per newly found process
TICK = os.sysconf("SC_CLK_TCK")
# the daemon's log lines of a capture's life: another pid's among them in a span means the daemon worked on
# another process then (another job's GPU process on a shared host)
CAPTURE_EVENTS = ("continuous capture", "probes ready", "probes detached", "continuous capture refused")
T = TypeVar("T")


# --- pure parts -------------------------------------------------------------------------------------------------

def cpu_s(pid: int, children: bool = False) -> float:
    """utime + stime of a whole process (all its threads, exited ones included), in seconds; children: the
    same of its children it has waited for (cutime + cstime: an unwind table built in a child process)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    i = 13 if children else 11
    return (int(f[i]) + int(f[i + 1])) / TICK


def all_cpu_s(pid: int) -> tuple[float, float]:
    """(the process's own CPU-seconds, its waited-for children's)."""
    return cpu_s(pid), cpu_s(pid, children=True)


def log_docs(path: Path, offset: int = 0) -> list[dict[str, Any]]:
    """The JSON objects of the daemon's log from byte `offset` on (attach_latency.log_events' reading)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return log_events(raw.decode(errors="replace") for raw in f)


def log_event(path: Path, msg: str, pid: int, offset: int = 0) -> dict[str, Any] | None:
    """The first JSON line of the daemon's log at or after byte `offset` whose msg and pid are these."""
    return next((d for d in log_docs(path, offset) if d.get("msg") == msg and d.get("pid") == pid), None)


def log_pids(path: Path, offset: int, msgs: tuple[str, ...] = CAPTURE_EVENTS) -> set[int]:
    """The pids of the daemon's log lines at or after byte `offset` whose msg is one of msgs."""
    return {d["pid"] for d in log_docs(path, offset) if d.get("msg") in msgs and isinstance(d.get("pid"), int)}


def cache_builds(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """The host-cache entries built between two Status totals, by kind (host_cache_builds_KIND)."""
    head = CACHE_PREFIX + "builds_"
    return {k[len(head):]: int(after[k] - before.get(k, 0)) for k in sorted(after)
            if k.startswith(head) and after[k] - before.get(k, 0) > 0}


def net_cpu(cpu: float, idle_rate: float, span_s: float) -> float:
    return cpu - idle_rate * span_s


def summary(rows: list[dict[str, Any]], budget_s: float = BUDGET_S) -> dict[str, Any]:
    """Median CPU-seconds per process (all, the first, the later ones) against the budget. Rows whose span
    saw the daemon capture another process ("others") are left out: that CPU was not this process's."""
    clean = [r for r in rows if not r["others"]]
    nets = [r["net_cpu_s"] for r in clean]
    first = [r["net_cpu_s"] for r in clean if r["process"] == 1]
    later = [r["net_cpu_s"] for r in clean if r["process"] != 1]
    med = statistics.median(nets) if nets else None
    return {"processes": len(rows), "counted": len(nets), "left_out": [r["process"] for r in rows if r["others"]],
            "median_cpu_s": med, "first_cpu_s": first[0] if first else None,
            "later_median_cpu_s": statistics.median(later) if later else None,
            "min_cpu_s": min(nets) if nets else None, "max_cpu_s": max(nets) if nets else None,
            "budget_s": budget_s, "within_budget": med is not None and med <= budget_s}


def wait_for(cond: Callable[[], T | None], timeout_s: float, what: str, poll_s: float = 0.02) -> T:
    """cond()'s first true value, polled against a deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)  # polling another process's state, with a deadline


# --- the daemon and the targets ---------------------------------------------------------------------------------

class Daemon:
    """deepctxd --continuous --prewarm in a temp dir, JSON log at info level, Status over gRPC."""

    def __init__(self, work: Path, shared_cache: bool, env: dict[str, str] | None,
                 prewarm_unwind_files: int | None = None, prewarm_symbol_files: int | None = None) -> None:
        self.work = work
        self.socket = str(work / "d.sock")
        self.log = work / "deepctxd.log"
        keys = [f'store_path = "{work / "windows.db"}"'] + ([] if shared_cache else [f'cache_dir = "{work / "cache"}"'])
        if prewarm_unwind_files is not None:
            keys.append(f"prewarm_unwind_files = {prewarm_unwind_files}")
        if prewarm_symbol_files is not None:
            keys.append(f"prewarm_symbol_files = {prewarm_symbol_files}")
        (work / "d.toml").write_text("\n".join(keys) + "\n")
        deepctxd = shutil.which("deepctxd", path=str(Path(sys.executable).parent)) or "deepctxd"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([deepctxd, "--foreground", "--continuous", "--prewarm", "--socket",
                                          self.socket, "--config", str(work / "d.toml"), "--log-format", "json",
                                          "--log-level", "info"], stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})
        from deepctx.cli.client import connect
        from deepctx.proto.v1 import deepctx_pb2 as pb

        self._pb = pb
        self._stub: Any = None

        def serving() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"deepctxd exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}")
            try:
                if self._stub is None:
                    self._stub = connect(self.socket)
                self.status()
                return True
            except Exception:  # not serving yet (no socket, connection refused)
                return False

        try:
            wait_for(serving, 60, "deepctxd to serve", poll_s=0.1)
        except BaseException:
            self.stop()
            raise

    def status(self) -> Any:
        return self._stub.Status(self._pb.StatusRequest(), timeout=30)

    def totals(self) -> dict[str, float]:
        return dict(self.status().totals)

    def sessions(self) -> dict[int, str]:
        return {s.pid: s.state for s in self.status().sessions}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def idle_rate(d: Daemon, seconds: float) -> float:
    """The daemon's CPU-seconds per second over `seconds` (a measuring span, not synchronization)."""
    c0, t0 = sum(all_cpu_s(d.proc.pid)), time.monotonic()
    time.sleep(seconds)
    return (sum(all_cpu_s(d.proc.pid)) - c0) / (time.monotonic() - t0)


def programs_idle(d: Daemon, n: int) -> bool:
    return int(d.totals().get("bpf_programs_idle", 0)) >= n


def prewarmed(d: Daemon, n: int) -> dict[str, float] | None:
    """The Status totals once the programs compiled ahead are loaded and the unwind rows' and symbol tables'
    prewarms ended (a daemon without unwind_prewarm_done or symbol_prewarm_done has none); None before."""
    t = d.totals()
    return t if (int(t.get("bpf_programs_idle", 0)) >= n and int(t.get("unwind_prewarm_done", 1))
                 and int(t.get("symbol_prewarm_done", 1))) else None


def measure(d: Daemon, i: int, args: argparse.Namespace, programs: int, kept: list[Target]) -> dict[str, Any]:
    """One new process: the idle rate before it, then its span (see the module's docstring)."""
    start = d.log.stat().st_size  # another capture from here on (baseline or span) spoils the row
    running = set(d.sessions())
    idle = idle_rate(d, args.baseline)
    before = d.totals()
    offset = d.log.stat().st_size
    (c0, k0), t0, w0 = all_cpu_s(d.proc.pid), time.monotonic(), time.time()
    t = Target(args.argv, wait=False)
    try:
        ready = wait_for(lambda: log_event(d.log, "probes ready", t.pid, offset), args.timeout,
                         f"the daemon to capture process {t.pid}")
        t_ready = time.monotonic()
        time.sleep(args.settle)  # the fixed settle span after the attach, part of what is measured
        (c1, k1), t1 = all_cpu_s(d.proc.pid), time.monotonic()
        t.ready()  # long since printed: the target warmed up and is calling
        sessions = d.sessions()
        after = d.totals()
        found = log_event(d.log, "continuous capture", t.pid, offset)
        span = t1 - t0
        row: dict[str, Any] = {
            "process": i + 1, "pid": t.pid, "state": sessions.get(t.pid, "gone"),
            "found_s": found["ts"] - w0 if found else None, "ready_s": ready["ts"] - w0,
            "attach_wait_s": t_ready - t0, "span_s": span, "compiled": ready.get("compiled"),
            "compile_s": ready.get("compile_s"), "attach_s": ready.get("attach_s"),
            "shared_with": ready.get("shared_with", 0),
            "cpu_s": c1 - c0, "children_cpu_s": k1 - k0, "idle_rate": idle,
            "net_cpu_s": net_cpu(c1 - c0 + k1 - k0, idle, span),
            "cache_builds": cache_builds(before, after),
            "others": sorted((running | set(sessions) | log_pids(d.log, start)) - {t.pid} - {k.pid for k in kept})}
        row["others_commands"] = {p: command_of(p) for p in row["others"]}
    except BaseException:
        t.end()
        raise
    if args.keep:
        kept.append(t)
        return row
    t.end()
    wait_for(lambda: log_event(d.log, "probes detached", t.pid, offset), args.timeout, f"capture {t.pid} to end")
    wait_for(lambda: t.pid not in d.sessions() and programs_idle(d, programs), args.timeout,
             f"capture {t.pid}'s session to go and its program to return to the pool", poll_s=0.1)
    return row


def held_by(d: Daemon) -> dict[str, float]:
    """What the daemon holds once the processes are captured: its programs, their maps' kernel memory, its
    resident memory, and the most it held since it started (VmHWM: the first process's table builds)."""
    t = d.totals()
    status = Path(f"/proc/{d.proc.pid}/status").read_text()
    kb = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
          if line.startswith(("VmRSS:", "VmHWM:"))}
    return {"programs_compiled": int(t.get("bpf_programs_compiled", 0)),
            "programs_shared": int(t.get("bpf_programs_shared", 0)),
            "map_mb": round(int(t.get("bpf_map_bytes", 0)) / 1e6, 1), "rss_mb": round(kb["VmRSS"] / 1024, 1),
            "peak_rss_mb": round(kb["VmHWM"] / 1024, 1)}


def command_of(pid: int) -> str:
    """A process's command line ("" once it has exited): whose GPU process the daemon also captured."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def machine() -> dict[str, Any]:
    return {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "loadavg_at_start": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| process | found (s) | attached (s) | program | span (s) | daemon CPU (s) | children (s) | idle rate "
            "| CPU − idle (s) | host-cache entries built | note |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")

    def program(r: dict[str, Any]) -> str:
        if r.get("compiled"):
            return "compiled"
        return f"shared with {r['shared_with']}" if r.get("shared_with") else "loaded ahead"

    def note(r: dict[str, Any]) -> str:
        out = [] if r["state"] == "capturing" else [f"state {r['state']}"]
        if r["others"]:
            out.append(f"other captures: {r['others']}")
        return "; ".join(out)

    return head + "".join(
        f"| {r['process']} | {r['found_s']:.2f} | {r['ready_s']:.2f} | {program(r)} | {r['span_s']:.2f} | "
        f"{r['cpu_s']:.2f} | "
        f"{r['children_cpu_s']:.2f} | "
        f"{100 * r['idle_rate']:.1f}% | **{r['net_cpu_s']:.3f}** | "
        f"{', '.join(f'{k} {v}' for k, v in r['cache_builds'].items()) or 'none'} | {note(r)} |\n" for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=5, help="new GPU processes, one at a time")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds after the attach still counted")
    ap.add_argument("--baseline", type=float, default=6.0,
                    help="seconds the daemon's idle CPU rate is measured before each process (a few scans)")
    ap.add_argument("--period", type=float, default=0.002, help="seconds between the target's calls")
    ap.add_argument("--target", choices=["cudart", "torch", "torch_cpu", "jax"], default="cudart",
                    help="bench/targets/steady_calls.py's workload (torch_cpu: PyTorch's CUDA build on the CPU, "
                         "which loads libtorch_cuda.so and libcudart as on a GPU host; torch, jax: the GPU host)")
    ap.add_argument("--target-python", help="the targets' interpreter (default this one): one that has PyTorch")
    ap.add_argument("--libcudart", help="the CUDA runtime the targets load (default: pip's nvidia-cuda-runtime, "
                                        "else the mock of tests/mocks)")
    ap.add_argument("--keep", action="store_true",
                    help="keep each process running (captured) while the next is measured; by default each is "
                         "ended and its capture gone before the next starts")
    ap.add_argument("--shared-cache", action="store_true",
                    help="the daemon's configured cache_dir (unwind tables on disk from earlier daemons); by "
                         "default an empty one in the temp dir: the first process pays a new host's builds")
    ap.add_argument("--prewarm-unwind-files", type=int, metavar="N",
                    help="the daemon's prewarm_unwind_files (default its own: 128; 0: no unwind rows placed at start)")
    ap.add_argument("--prewarm-symbol-files", type=int, metavar="N",
                    help="the daemon's prewarm_symbol_files (default its own: 32; 0: no symbol tables built at start)")
    ap.add_argument("--programs", type=int, default=4,
                    help="programs a continuous daemon compiles ahead (windowed GPU with and without a GEMM "
                         "library's .eh_frame continuation, GPU, CPU-only Python)")
    ap.add_argument("--retries", type=int, default=5,
                    help="more processes, at most this many, in place of those whose baseline or span saw the "
                         "daemon capture another process of the host (left out of the medians)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds any wait may take before it fails")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="CPU-seconds per new process (issue #30)")
    ap.add_argument("--json", metavar="OUT", help="write the machine, the arguments, the rows and the summary")
    ap.add_argument("--daemon-log", metavar="DIR", help="keep the daemon's JSON log there")
    ap.add_argument("--self-profile", metavar="FILE",
                    help="the daemon samples its own threads' stacks (DEEPCTX_SELF_PROFILE) into FILE (folded) "
                         "when it stops: where its CPU goes (the sampler costs CPU too: the figures are then "
                         "no figures)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (deepctxd loads BPF programs)")
    if args.libcudart is None:
        try:
            args.libcudart = cuda_runtime()  # pip's nvidia-cuda-runtime
        except SystemExit:
            if not MOCK_CUDART.exists():
                raise SystemExit("no CUDA runtime: install nvidia-cuda-runtime (./install.sh) or build tests/mocks") from None
            args.libcudart = str(MOCK_CUDART)
    # once, before the daemon starts: target_argv's check imports the framework in a process of its own, which a
    # continuous daemon would capture
    args.argv = (target_argv(args.target, args.period, args.target_python) if args.target != "cudart" else
                 [sys.executable, str(TARGET), "cudart", args.libcudart, "--period", str(args.period)])
    runtime = "mock" if "tests/mocks" in args.libcudart else "real"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally blocks end the daemon and targets
    info = machine()
    print(f"# {info['host']}, {info['cpus']} CPUs, kernel {info['kernel']}, Python {info['python']}, "
          f"load {info['loadavg_at_start']}, {runtime} libcudart {args.libcudart}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="deepctx-newproc-"))
    env = {"DEEPCTX_SELF_PROFILE": str(Path(args.self_profile).resolve())} if args.self_profile else None
    rows: list[dict[str, Any]] = []
    kept: list[Target] = []
    held: dict[str, float] = {}
    d = Daemon(work, args.shared_cache, env, args.prewarm_unwind_files, args.prewarm_symbol_files)
    try:
        t = time.monotonic()
        warm = wait_for(lambda: prewarmed(d, args.programs), 600, "the programs compiled ahead and the "
                        "prewarms", poll_s=0.2)
        info["unwind_prewarm"] = {k: warm.get(f"unwind_prewarm_{k}", 0) for k in ("files", "rows", "ms", "cpu_ms")}
        info["symbol_prewarm"] = {k: warm.get(f"symbol_prewarm_{k}", 0) for k in ("files", "passed", "ms", "cpu_ms")}
        print(f"# programs compiled ahead and loaded, prewarms ended {time.monotonic() - t:.1f} s after the "
              f"daemon served; unwind prewarm: {info['unwind_prewarm']}; symbol prewarm: {info['symbol_prewarm']}",
              flush=True)
        while sum(not r["others"] for r in rows) < args.processes and len(rows) < args.processes + args.retries:
            rows.append(measure(d, len(rows), args, args.programs, kept))
            r = rows[-1]
            print(f"process {r['process']} (pid {r['pid']}): found {r['found_s']:.2f} s, attached "
                  f"{r['ready_s']:.2f} s, span {r['span_s']:.2f} s, daemon CPU {r['cpu_s']:.2f} s, idle "
                  f"{100 * r['idle_rate']:.1f}%, net {r['net_cpu_s']:.3f} s, built {r['cache_builds']}"
                  + (f", other captures {r['others']}" if r["others"] else ""), flush=True)
        held = held_by(d)
        print(f"# at the end ({len(kept)} processes still captured): {held}", flush=True)
    finally:
        for k in kept:
            k.end()
        rc = d.stop()
        if args.daemon_log:
            Path(args.daemon_log).mkdir(parents=True, exist_ok=True)
            shutil.copy(d.log, Path(args.daemon_log) / "deepctxd.log")
        shutil.rmtree(work, ignore_errors=True)
    s = summary(rows, args.budget)
    print("\n" + table(rows))
    def f3(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}"

    left = f"; left out (another capture in the span): processes {s['left_out']}" if s["left_out"] else ""
    print(f"median {f3(s['median_cpu_s'])} CPU-s per new process over {s['counted']} (min {f3(s['min_cpu_s'])}, "
          f"max {f3(s['max_cpu_s'])}); first {f3(s['first_cpu_s'])}, later ones' median "
          f"{f3(s['later_median_cpu_s'])}; budget {s['budget_s']:g} s: {'met' if s['within_budget'] else 'MISSED'}"
          + left)
    if rc != 0:
        print(f"deepctxd exited with {rc}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "args": vars(args), "runtime": runtime,
                                               "rows": rows, "summary": s, "held": held}, indent=1))
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
