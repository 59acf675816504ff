"""deepctxd's memory with several targets captured at once, and across back-to-back captures (issue #30).

    sudo .venv/bin/python bench/daemon_memory.py [--targets 1,5,10] [--target cudart|torch|jax] [--settle 5]
    sudo .venv/bin/python bench/daemon_memory.py --captures 30 [--duration 0.3]
    .venv/bin/python bench/daemon_memory.py --tables FILE [FILE ...]

--targets (the default): starts a daemon on a private socket (its own cache folder), reads its resident
memory as it starts and once the programs it compiles ahead are loaded (theirs, not the first capture's),
then starts CPython targets (bench/targets/steady_calls.py: cudart loads the real
CUDA runtime; torch and jax run a training step on the GPU host) and attaches to each (Python walker, GPU
probes, CPU sampler, native unwinder), up to each count in turn. With all those captures running it reads
the daemon's RSS (the most seen over --settle seconds) and its peak, and prints them side by side with the
kernel memory of its BPF maps (Status bpf_map_bytes, outside the RSS). Then,
in this process, it loads what the daemon's host cache holds for those targets (symbol tables, unwind tables,
interpreter layouts, as the captures do; host/file_cache.py) and prints its sizes per kind and the largest
allocations behind them (tracemalloc).

--heap FILE: the daemon traces its own heap (daemon/self_memory.py) and, at each row taken while captures
run or after they stop, prints the lines of deepctx's code that hold the most of it.

--captures: captures tests/targets/bin/cpu_burner again and again and prints the daemon's anonymous and
file-backed resident memory (MB) after each capture.

--tables: the unwind tables of the given ELF files, built as deepctxd builds them, once inside the
process and once in build_child processes (host/unwind/cache.py), each in a fresh interpreter: its
anonymous memory before and after (the tables themselves included), its peak, and the build time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from harness import Target, start_daemon, stop_daemon  # noqa: E402

MB = 1 << 20
HEAP_TOP = 15  # owners of the daemon's heap printed per --heap report
PREWARMED = 2  # programs deepctxd compiles ahead when not continuous: a Python process with a GPU runtime, one without


def memory_mb(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon, RssFile and VmHWM (peak RSS) of a process, in MiB."""
    from deepctx.daemon.self_memory import status_mb

    return status_mb(pid)


def rss_mb(pid: int) -> tuple[int, int]:
    m = memory_mb(pid)
    return int(m["RssAnon"]), int(m["RssFile"])


TABLES = """
import json, sys, time
from pathlib import Path
def status(k):
    return next(int(l.split()[1]) // 1024 for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(k))
from deepctx.host.unwind.cache import TableCache
before = status("RssAnon")
cache = TableCache(child_min_bytes=int(sys.argv[1]))
t0 = time.perf_counter()
got = cache.get_many([(f, "00:00", i) for i, f in enumerate(sys.argv[2:])])
print(json.dumps({"seconds": time.perf_counter() - t0, "before": before, "after": status("RssAnon"),
                  "peak": status("VmHWM"), "tables_mb": cache.memory / 1e6,
                  "rows": sum(len(g[1]) for g in got if not isinstance(g, OSError)), **cache.counters}))
"""


def tables(files: list[str]) -> int:
    """In-process and child-process builds of the same files' tables, side by side."""
    print(f"{'built':10} {'rows':>10} {'tables MB':>10} {'anon before':>12} {'anon after':>11} {'peak RSS':>9} {'seconds':>8}")
    for name, threshold in (("in daemon", 1 << 62), ("in child", 0)):
        out = subprocess.run([sys.executable, "-c", TABLES, str(threshold), *files], capture_output=True, text=True,
                             check=True, cwd=REPO).stdout
        r = json.loads(out)
        print(f"{name:10} {r['rows']:10d} {r['tables_mb']:10.1f} {r['before']:12d} {r['after']:11d} {r['peak']:9d} "
              f"{r['seconds']:8.2f}")
    return 0


def captures(args: argparse.Namespace) -> int:
    subprocess.run(["make", "-s", "-C", str(REPO / "tests/targets")], check=True)
    with tempfile.TemporaryDirectory(prefix="deepctx-mem-") as work:
        d = start_daemon(Path(work), *_config(Path(work), args))
        try:
            print("capture  RssAnon MB  RssFile MB")
            for i in range(args.captures):
                with Target([str(REPO / "tests/targets/bin/cpu_burner"), "30"]) as t:
                    d.attach_json(t.pid, "--duration", args.duration)
                anon, file = rss_mb(d.proc.pid)
                print(f"{i + 1:7d}  {anon:10d}  {file:10d}", flush=True)
        finally:
            stop_daemon(d)
    return 0


def _config(work: Path, args: argparse.Namespace) -> list[str]:
    lines = [f'cache_dir = "{work / "cache"}"', 'store_path = ""']
    if args.host_cache_bytes:
        lines.append(f"host_cache_bytes = {args.host_cache_bytes}")
    (work / "d.toml").write_text("\n".join(lines) + "\n")
    return ["--config", str(work / "d.toml")]


def _totals(d) -> dict[str, int]:
    r = d.cli("status", "--format", "json")
    if r.returncode != 0:
        raise RuntimeError(f"deepctx status: {r.stderr.strip()}")
    return {k: int(v) for k, v in json.loads(r.stdout).get("totals", {}).items()}  # int64 values come as strings


def _maps_mb(d) -> dict[str, float]:
    """The kernel memory of the daemon's BPF maps (outside its RSS), in MiB."""
    t = _totals(d)
    return {"maps": t.get("bpf_map_bytes", 0) / MB, "maps_n": t.get("bpf_maps", 0)}


def _sessions(d) -> dict[int, str]:
    r = d.cli("status", "--format", "json")
    if r.returncode != 0:
        raise RuntimeError(f"deepctx status: {r.stderr.strip()}")
    return {s["pid"]: s["state"] for s in json.loads(r.stdout).get("sessions") or []}


def heap_report(d, path: str | None, label: str) -> None:
    """With --heap: the daemon appends where its heap is to path (SIGUSR2, daemon/self_memory.py), and its
    largest owners are printed here."""
    if not path:
        return
    from deepctx.daemon.self_memory import REPORT_END

    def ends() -> int:
        return Path(path).read_text().count(REPORT_END) if Path(path).exists() else 0

    before = ends()
    d.proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 120
    while ends() == before:
        if time.monotonic() > deadline:
            raise RuntimeError("deepctxd wrote no heap report within 120 s of SIGUSR2")
        time.sleep(0.2)  # a bench's poll against a deadline
    last = Path(path).read_text().split(REPORT_END)[-2].strip().splitlines()
    first_owner = next((i for i, line in enumerate(last) if " blocks  " in line), len(last))
    print(f"heap, {label}:", *last[1:first_owner + HEAP_TOP], sep="\n  ", flush=True)


def many_targets(args: argparse.Namespace) -> int:
    from attach_latency import Target as Steady
    from attach_latency import target_argv

    counts = sorted({int(n) for n in args.targets.split(",")})
    argv = target_argv(args.target, args.period, args.target_python)
    rows: list[tuple[str, int, dict[str, float]]] = []
    targets: list[Steady] = []
    attaches: list[subprocess.Popen] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally blocks end what was started
    with tempfile.TemporaryDirectory(prefix="deepctx-mem-") as work:
        heap = {"DEEPCTX_SELF_MEMORY": str(Path(args.heap).resolve())} if args.heap else None
        d = start_daemon(Path(work), *_config(Path(work), args), "--prewarm" if args.prewarm else "--no-prewarm",
                         env=heap)
        try:
            rows.append(("started", 0, memory_mb(d.proc.pid) | _maps_mb(d)))
            # the programs compiled ahead (prewarm_programs) are the daemon's, not the first capture's
            deadline = time.monotonic() + (args.timeout if args.prewarm else 0)
            while time.monotonic() < deadline:
                t = _totals(d)
                if t.get("bpf_programs_idle", 0) >= PREWARMED:
                    rows.append(("programs loaded", 0, memory_mb(d.proc.pid) | _maps_mb(d)))
                    break
                time.sleep(0.2)  # a bench's poll against a deadline
            for n in counts:
                while len(targets) < n:
                    t = Steady(argv)
                    targets.append(t)
                    attaches.append(subprocess.Popen(
                        [*_deepctx(), "attach", str(t.pid), "--duration", "3600", "--format", "json", "--quiet",
                         "-o", os.devnull], env=d.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                deadline = time.monotonic() + args.timeout
                while sum(s == "capturing" for s in _sessions(d).values()) < n:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{n} captures were not all running within {args.timeout} s")
                    if any(a.poll() is not None for a in attaches):
                        raise RuntimeError("a deepctx attach ended early")
                    time.sleep(0.2)  # a bench's poll against a deadline
                most: dict[str, float] = {}
                start = time.monotonic()
                end, mark = start + args.settle, start + (args.every or args.settle + 1)
                while time.monotonic() < end:  # the captures poll, name stacks, refresh maps meanwhile
                    now = memory_mb(d.proc.pid)
                    most = {k: max(v, most.get(k, 0.0)) for k, v in now.items()}
                    if time.monotonic() >= mark:  # a row per --every: whether the RSS grows as captures run on
                        rows.append((f"{n} at {mark - start:.0f} s", n, now | _maps_mb(d)))
                        print(rows[-1][0], f"VmRSS {now['VmRSS']:.1f} MB", flush=True)
                        mark += args.every
                    time.sleep(0.25)
                rows.append((f"{n} capturing", n, most | _maps_mb(d)))
                heap_report(d, args.heap, f"{n} capturing")
            for i, (t, a) in enumerate(zip(targets, attaches, strict=True)):  # one at a time: what each stop costs
                d.cli("stop", str(t.pid))
                a.wait(timeout=300)
                if i in (0, len(targets) - 1):
                    rows.append((f"{i + 1} stopped", len(targets), memory_mb(d.proc.pid) | _maps_mb(d)))
                    heap_report(d, args.heap, f"{i + 1} stopped")
            status = json.loads(d.cli("status", "--format", "json").stdout or "{}")
        except BaseException:
            print(f"deepctxd's log ends:\n{d.log.read_text()[-4000:]}", file=sys.stderr)
            raise
        finally:
            if args.daemon_log:
                Path(args.daemon_log).write_text(d.log.read_text())
            for a in attaches:
                if a.poll() is None:
                    a.kill()
                    a.wait()
            for t in targets:
                t.end()
            stop_daemon(d)
    print(f"# {os.cpu_count()} CPUs, kernel {os.uname().release}, target {args.target}, "
          f"host_cache_bytes {args.host_cache_bytes or 'default'}")
    print(f"{'daemon':15} {'targets':>7} {'VmRSS MB':>9} {'RssAnon MB':>11} {'RssFile MB':>11} {'peak MB':>8} "
          f"{'maps MB':>8}")
    for name, n, m in rows:
        print(f"{name:15} {n:7d} {m['VmRSS']:9.1f} {m['RssAnon']:11.1f} {m['RssFile']:11.1f} {m['VmHWM']:8.1f} "
              f"{m.get('maps', 0.0):8.1f} ({m.get('maps_n', 0)})")
    print("maps MB: the kernel memory of the daemon's BPF maps (Status bpf_map_bytes), outside its RSS")
    if "host_cache" in status:  # once deepctx status reports the daemon's own cache
        print("daemon host cache:", json.dumps(status["host_cache"]))
    return cache_contents(args, argv, max(counts))


def cache_contents(args: argparse.Namespace, argv: list[str], n: int) -> int:
    """What the host cache holds for n targets of this program: loaded here as a capture loads it."""
    from attach_latency import Target as Steady

    from deepctx.daemon.symbolize.native import SymbolCache
    from deepctx.host.file_cache import FileCache
    from deepctx.host.procfs import AddressSpace, ProcessMemory, read_maps
    from deepctx.host.python.discovery import find_interpreter
    from deepctx.host.unwind.cache import TableCache

    targets = [Steady(argv) for _ in range(n)]
    try:
        with tempfile.TemporaryDirectory(prefix="deepctx-mem-") as work:
            files = FileCache(args.host_cache_bytes) if args.host_cache_bytes else FileCache()
            symbols = SymbolCache(files=files)
            unwind = TableCache(Path(work) / "unwind", files=files)
            tracemalloc.start(8)
            held = []  # what one capture holds while it runs (its symbolizer keeps the tables it used)
            for t in targets:
                space = AddressSpace(read_maps(t.pid))
                code = [m for m in space.mappings if m.executable and m.file_backed]
                held += [symbols.get(t.pid, m) for m in code]
                held += [r for r in unwind.get_many([(f"/proc/{t.pid}/map_files/{m.start:x}-{m.end:x}", *m.file_key)
                                                     for m in code])]
                with ProcessMemory(t.pid) as mem:
                    held.append(find_interpreter(t.pid, space, mem, files))
            snap = tracemalloc.take_snapshot()
            tracemalloc.stop()
            s = files.stats()
            print(f"\nhost cache for {n} targets: {s['entries']} entries, {s['bytes'] / MB:.1f} MiB of "
                  f"{s['budget_bytes'] / MB:.0f} MiB; builds {s['builds']} "
                  f"({', '.join(f'{k[7:]} {v}' for k, v in s.items() if k.startswith('builds_'))}); "
                  f"hits {s['hits']}; evictions {s['evictions']}")
            for k, v in s.items():
                if k.startswith("bytes_"):
                    print(f"  {k[6:]:8} {v / MB:8.2f} MiB")
            print(f"  unwind tables in memory (held by the captures; a copy on disk): {unwind.memory / MB:.2f} MiB")
            print("largest allocations while loading (tracemalloc, by line):")
            for st in snap.statistics("lineno")[:8]:
                f = st.traceback[0]
                print(f"  {st.size / MB:8.2f} MiB {st.count:8d} blocks  {Path(f.filename).name}:{f.lineno}")
    finally:
        for t in targets:
            t.end()
    return 0


def _deepctx() -> list[str]:
    from harness import DEEPCTX

    return DEEPCTX


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="1,5,10", help="target counts, captured at once, in turn (default 1,5,10)")
    ap.add_argument("--target-python", help="the targets' interpreter (default this one): one that has PyTorch")
    ap.add_argument("--target", choices=["cudart", "torch", "torch_cpu", "jax"], default="cudart",
                    help="steady_calls.py's workload (torch, jax: the GPU host)")
    ap.add_argument("--period", type=float, default=0.002, help="seconds between the targets' calls or steps")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds the captures run at each count before "
                    "the RSS is read (the most seen meanwhile)")
    ap.add_argument("--every", type=float, default=0.0, metavar="S",
                    help="also a row every S seconds of --settle (the RSS now, not the most seen), to see a trend")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for the captures at a count to start")
    ap.add_argument("--prewarm", action=argparse.BooleanOptionalAction, default=True,
                    help="the daemon compiles its programs ahead as it starts, as deepctxd does by default (default: "
                         "on; --no-prewarm: the first captures compile their own)")
    ap.add_argument("--host-cache-bytes", type=int, default=0, help="the daemon's host_cache_bytes (0: default)")
    ap.add_argument("--daemon-log", metavar="FILE", help="keep the daemon's JSON log there")
    ap.add_argument("--heap", metavar="FILE", help="the daemon traces its heap (DEEPCTX_SELF_MEMORY=FILE) and "
                    "reports its largest owners with each row taken while captures run or after they stop")
    ap.add_argument("--captures", type=int, help="back-to-back captures of cpu_burner instead")
    ap.add_argument("--duration", default="0.3", help="with --captures: seconds per capture")
    ap.add_argument("--tables", nargs="+", metavar="FILE")
    args = ap.parse_args()
    if args.tables:
        return tables(args.tables)
    if os.geteuid() != 0:
        raise SystemExit("needs root (deepctxd loads BPF programs)")
    if args.captures:
        return captures(args)
    return many_targets(args)


if __name__ == "__main__":
    sys.exit(main())
