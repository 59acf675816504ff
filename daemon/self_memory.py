"""Where deepctxd's own memory is: the Python heap by the daemon's code that allocated it, for diagnosing
the daemon's resident memory (issue #30's budget).

Enabled by DEEPCTX_SELF_MEMORY=PATH (off by default: tracing every allocation slows the daemon and adds
about a third to its heap). The daemon then traces its allocations from the start (tracemalloc), and each
SIGUSR2 appends a report to PATH: the process's resident memory, what tracemalloc traces (numpy arrays
included: numpy reports its buffers to it), and the largest owners, each allocation charged to the
innermost frame of deepctx's own code on its traceback (the line of ours that asked for it, through numpy,
bcc's Python side or the standard library). Memory that native code allocates on its own (LLVM's compiles,
bcc's modules, malloc's free lists) is the resident anonymous memory that tracemalloc does not see: the
report shows it as `untraced`."""

from __future__ import annotations

import os
import signal
import threading
import tracemalloc
from collections import defaultdict
from pathlib import Path

ENV = "DEEPCTX_SELF_MEMORY"
FRAMES = 24  # deep enough to reach our code from inside numpy, bcc and the standard library
TOP = 30  # owners listed per report
REPORT_END = "# end of report"  # the last line of each report: a reader waits for it
# the deepctx package's folder as imported (the GPU host links the subpackages under a deepctx/ folder)
# and as it lies on disk
_PACKAGES = tuple(dict.fromkeys(str(p.parents[1]) + os.sep for p in (Path(__file__), Path(__file__).resolve())))
_lock = threading.Lock()
_reports = 0


def status_mb(pid: int | str = "self") -> dict[str, float]:
    """VmRSS, RssAnon, RssFile and VmHWM (peak RSS) of a process (this one by default), in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def _owner(tb: tracemalloc.Traceback) -> str:
    """The innermost frame of deepctx's code on the traceback (file relative to the package, and line);
    the innermost frame of all where none is ours."""
    for frame in reversed(tb):  # tracemalloc keeps the most recent call last
        for package in _PACKAGES:
            if frame.filename.startswith(package):
                return f"{frame.filename[len(package):]}:{frame.lineno}"
    f = tb[-1]
    return f"{f.filename}:{f.lineno}"


def owners(snapshot: tracemalloc.Snapshot) -> list[tuple[str, int, int]]:
    """(owner, bytes, blocks), largest first."""
    size: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for st in snapshot.statistics("traceback"):
        who = _owner(st.traceback)
        size[who] += st.size
        count[who] += st.count
    return sorted(((w, size[w], count[w]) for w in size), key=lambda r: -r[1])


def report(path: str) -> None:
    """Appends one report to path (see the module's doc)."""
    global _reports
    if not tracemalloc.is_tracing():
        return
    with _lock:
        _reports += 1
        snap = tracemalloc.take_snapshot()
        traced, peak = tracemalloc.get_traced_memory()
        mem = status_mb()
        mb = 1 << 20
        lines = [f"# report {_reports}: pid {os.getpid()}",
                 f"VmRSS {mem['VmRSS']:.1f} MB, RssAnon {mem['RssAnon']:.1f} MB, RssFile {mem['RssFile']:.1f} MB, "
                 f"peak {mem['VmHWM']:.1f} MB",
                 f"traced {traced / mb:.1f} MB (peak {peak / mb:.1f} MB; tracemalloc's own "
                 f"{tracemalloc.get_tracemalloc_memory() / mb:.1f} MB); untraced anonymous "
                 f"{mem['RssAnon'] - (traced + tracemalloc.get_tracemalloc_memory()) / mb:.1f} MB"]
        for who, size, blocks in owners(snap)[:TOP]:
            lines.append(f"{size / mb:9.2f} MB {blocks:9d} blocks  {who}")
        lines.append(REPORT_END)
        with open(path, "a") as f:
            f.write("\n".join(lines) + "\n")


def start_from_env() -> str | None:
    """Starts tracing and the SIGUSR2 handler when DEEPCTX_SELF_MEMORY is set (from the main thread)."""
    path = os.environ.get(ENV)
    if not path:
        return None
    tracemalloc.start(FRAMES)
    signal.signal(signal.SIGUSR2, lambda signum, frame: report(path))
    return path
