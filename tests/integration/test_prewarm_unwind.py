"""The unwind tables of the interpreter and the C/C++ runtime libraries are built as the daemon starts (#30):
the first capture of a Python process of the same files builds none of them. They were most of the continuous
daemon's CPU for its first GPU process on a new host (bench/continuous_new_process.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness import Daemon, Target, start_daemon, stop_daemon, wait_for

# a Python process without site (no extension module loaded): the interpreter, libc, libm, libz, libexpat, ld.so
LOOP = "import os, time\nprint('ready', os.getpid(), flush=True)\nwhile True:\n    time.sleep(0.01)\n"


def totals(d: Daemon) -> dict[str, int]:
    r = d.cli("status", "--format", "json")
    assert r.returncode == 0, r.stderr
    return {k: int(v) for k, v in json.loads(r.stdout)["totals"].items()}  # int64 map values come as strings


def unwind_builds(d: Daemon) -> int:
    return totals(d).get("host_cache_builds_unwind", 0)


def logged(d: Daemon, msg: str) -> dict | None:
    for line in d.log.read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("msg") == msg:
            return json.loads(line)
    return None


def test_first_capture_of_a_python_process_builds_no_runtime_table(tmp_path: Path) -> None:
    (tmp_path / "d.toml").write_text(f'cache_dir = "{tmp_path / "cache"}"\n')  # an empty cache: a new host
    d = start_daemon(tmp_path, "--prewarm", "--config", str(tmp_path / "d.toml"))
    try:
        # the start's work is done once its two programs are loaded (the tables are built before them)
        wait_for(lambda: totals(d).get("bpf_programs_idle") == 2, timeout=300, what="programs compiled ahead")
        before = unwind_builds(d)
        assert before >= 3  # python3.x, libc, ld.so at least
        done = logged(d, "unwind tables prewarmed")
        assert done is not None and done["files"] == done["of"] == before
        with Target([sys.executable, "-S", "-c", LOOP]) as t:
            doc = d.attach_json(t.pid, "--duration", "1")
        assert doc["ended"] == "duration"
        assert unwind_builds(d) == before  # every file of the process was found in the per-file cache
    finally:
        assert stop_daemon(d) == 0, d.log.read_text()[-4000:]
