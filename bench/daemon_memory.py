"""deepctxd's memory across back-to-back captures.

    sudo .venv/bin/python bench/daemon_memory.py [--captures 30] [--duration 0.3]

Starts a daemon on a private socket, captures tests/targets/bin/cpu_burner again and again, and prints
the daemon's anonymous and file-backed resident memory (MB) after each capture.
"""

from __future__ import annotations

import argparse
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--captures", type=int, default=30)
    ap.add_argument("--duration", default="0.3")
    args = ap.parse_args()
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
