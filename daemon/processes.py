"""Which processes are worth profiling: those running CPython or a GPU runtime (from their mappings)."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

from deepctx.daemon import access
from deepctx.host import procfs
from deepctx.host.gpu_runtimes import GPU_LIBRARY

PYTHON_LIBRARY = re.compile(r"^libpython(\d+\.\d+)t?\.so")
PYTHON_EXE = re.compile(r"^python(\d+\.\d+)t?$")


@dataclass(frozen=True)
class ProcessSummary:
    pid: int
    user: str
    command: str
    python_version: str
    gpu_libraries: list[str]


def summarize(pid: int) -> ProcessSummary | None:
    try:
        info = procfs.process_info(pid)
        if info.is_kernel_thread:
            return None
        maps = procfs.read_maps(pid)
    except (procfs.ProcessGone, PermissionError):
        return None
    names = {os.path.basename(m.path) for m in maps if m.path.startswith("/")}
    # loaded, not merely read: deepctxd itself maps the CUDA libraries it reads symbols from (read-only)
    loaded = {os.path.basename(m.path) for m in maps if m.path.startswith("/") and m.executable}
    gpu = sorted(n for n in loaded if GPU_LIBRARY.match(n))
    version = ""
    for n in names:
        match = PYTHON_LIBRARY.match(n)
        if match:
            version = match.group(1)
            break
    if not version:
        try:
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            exe = ""
        match = PYTHON_EXE.match(exe)
        if match:
            version = match.group(1)
    return ProcessSummary(pid, info.user, info.command, version, gpu)


def list_processes(include_all: bool = False, caller: access.Identity | None = None) -> list[ProcessSummary]:
    """Python and GPU processes (every user-space process with include_all). With a caller, only what /proc
    would show that caller (see shown_to); None: everything (the daemon itself, privileged callers)."""
    me = os.getpid()
    found = [s for s in (summarize(pid) for pid in procfs.all_pids() if pid != me) if s is not None]
    if caller is not None:
        found = shown_to(caller, found)
    # filtered after the caller's view: a process whose maps the caller may not read is not a "Python or GPU
    # process" to them (that it is one was learnt from its maps)
    return [s for s in found if include_all or s.python_version or s.gpu_libraries]


def shown_to(caller: access.Identity, summaries: list[ProcessSummary]) -> list[ProcessSummary]:
    """What /proc shows the caller, the kernel asked as the caller: processes hidden from it (hidepid) are
    left out; for those whose maps it may not read, nothing learnt from maps or memory (Python version, GPU
    libraries) is kept. The command line stays: /proc/PID/cmdline of a visible process is readable by all."""
    vis = access.visibility(caller, [s.pid for s in summaries])
    # hidepid=noaccess lists /proc/PID but keeps its files closed: no command line to show, so no entry
    no_maps = [s.pid for s in summaries if vis.get(s.pid) and vis[s.pid].visible and not vis[s.pid].maps]
    readable = access.as_caller(caller, lambda: {pid for pid in no_maps if _opens(f"/proc/{pid}/cmdline")})
    out = []
    for s in summaries:
        v = vis.get(s.pid)
        if v is None or not v.visible:
            continue
        if v.maps:
            out.append(s)
        elif s.pid in readable:
            out.append(dataclasses.replace(s, python_version="", gpu_libraries=[]))
    return out


def _opens(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        return True
    except OSError:
        return False
