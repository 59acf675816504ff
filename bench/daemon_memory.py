"""deepctxd's memory across back-to-back captures.

    sudo .venv/bin/python bench/daemon_memory.py [--captures 30] [--duration 0.3]
    .venv/bin/python bench/daemon_memory.py --tables FILE [FILE ...]

Starts a daemon on a private socket, captures tests/targets/bin/cpu_burner again and again, and prints
the daemon's anonymous and file-backed resident memory (MB) after each capture.

--tables: the unwind tables of the given ELF files, built as deepctxd builds them, once inside the
process and once in build_child processes (host/unwind/cache.py), each in a fresh interpreter: its
anonymous memory before and after (the tables themselves included), its peak, and the build time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from harness import Target, start_daemon, stop_daemon  # noqa: E402


def rss_mb(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("RssAnon", "RssFile")):
            key, value = line.split(":")
            fields[key] = int(value.split()[0]) // 1024
    return fields["RssAnon"], fields["RssFile"]


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--captures", type=int, default=30)
    ap.add_argument("--duration", default="0.3")
    ap.add_argument("--tables", nargs="+", metavar="FILE")
    args = ap.parse_args()
    if args.tables:
        return tables(args.tables)
    subprocess.run(["make", "-s", "-C", str(REPO / "tests/targets")], check=True)
    d = start_daemon(Path(tempfile.mkdtemp(prefix="deepctx-mem-")))
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


if __name__ == "__main__":
    sys.exit(main())
