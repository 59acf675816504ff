"""Which processes are worth profiling: those running CPython or a GPU runtime (from their mappings)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from deepctx.daemon import procfs

GPU_LIBRARY = re.compile(r"^(libcuda\.so|libcudart\.so|libamdhip64\.so|libnccl\.so|librccl\.so|libhsa-runtime64\.so)")
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


def list_processes(include_all: bool = False) -> list[ProcessSummary]:
    out = []
    me = os.getpid()
    for pid in procfs.all_pids():
        if pid == me:
            continue
        s = summarize(pid)
        if s is None:
            continue
        if include_all or s.python_version or s.gpu_libraries:
            out.append(s)
    return out
