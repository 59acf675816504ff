"""Which processes count as GPU processes (the continuous scan, `deepctx ps`): those that load a GPU runtime,
not those that only read its file (deepctxd itself maps the libraries it reads symbols from)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from harness import cuda_runtime

from deepctx.daemon.processes import summarize

HOLD = """
import ctypes, mmap, sys
path, how = sys.argv[1], sys.argv[2]
if how == "load":
    held = ctypes.CDLL(path)
else:
    f = open(path, "rb")
    held = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print("ready", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize(("how", "gpu"), [("load", True), ("read", False)])
def test_a_gpu_process_loads_its_runtime_rather_than_reading_it(how: str, gpu: bool) -> None:
    lib = cuda_runtime()
    p = subprocess.Popen([sys.executable, "-c", HOLD, lib, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        s = summarize(p.pid)
        assert s is not None
        assert s.gpu_libraries == ([Path(lib).name] if gpu else [])
    finally:
        p.kill()
        p.wait()
