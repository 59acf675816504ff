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

import ctypes
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


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def malloc_mb() -> dict[str, float] | None:
    """glibc's malloc over all its arenas, in MiB: in_use (allocated and not freed: native code's live data
    and Python's), free (freed and kept in malloc's
    arenas; whole pages that malloc_trim handed back stay counted here without being resident) and mmapped (chunks of
    their own mapping, in use). None without glibc's mallinfo2 (glibc before 2.33, musl)."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    m = fn()
    mb = 1 << 20
    return {"in_use": m.uordblks / mb, "free": m.fordblks / mb, "mmapped": m.hblkhd / mb}


def anonymous_mappings(pid: int | str = "self") -> list[tuple[str, float, float]]:
    """(name, size MiB, resident anonymous MiB) of every mapping with anonymous pages, the most resident
    first: [heap] (malloc's main arena), [stack], and unnamed ones (malloc's other arenas and large chunks,
    LLVM's code sections, thread stacks, ...) named by their address range."""
    out: list[tuple[str, float, float]] = []
    name = ""
    size = 0.0
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and ":" not in fields[0]:  # a mapping's first line
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            size = (hi - lo) / (1 << 20)
            name = fields[5] if len(fields) > 5 else fields[0]
        elif fields[0] == "Anonymous:" and int(fields[1]) > 0:
            out.append((name, size, int(fields[1]) / 1024))
    return sorted(out, key=lambda r: -r[2])


def native_lines(pid: int | str = "self", top: int = 6) -> list[str]:
    """Where the anonymous memory that tracemalloc does not see is: malloc's totals, and the mappings that
    hold it (a report's lines)."""
    lines = []
    m = malloc_mb()
    if m is not None:
        lines.append(f"malloc: in use {m['in_use']:.1f} MB, free in its arenas {m['free']:.1f} MB, "
                     f"in chunks of their own mapping {m['mmapped']:.1f} MB")
    maps = anonymous_mappings(pid)
    heap = sum(r[2] for r in maps if r[0] == "[heap]")
    files = sum(r[2] for r in maps if r[0].startswith("/"))
    other = sum(r[2] for r in maps) - heap - files
    lines.append(f"anonymous by mapping: [heap] {heap:.1f} MB, unnamed and stacks {other:.1f} MB, "
                 f"in files' private pages {files:.1f} MB; the largest:")
    lines += [f"  {rss:8.1f} MB of {size:8.1f} MB  {name}" for name, size, rss in maps[:top]]
    return lines


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
        lines += native_lines()
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
