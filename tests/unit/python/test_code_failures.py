"""Why a code object could not be read, on a live interpreter and after it exited (issue 35.2): in a running
process it was freed ([code object freed]); once the process is gone it is [unknown]."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import userwalk
from targets.python.pythons import INTERPRETERS

from deepctx.host.procfs import AddressSpace, ProcessMemory, read_maps
from deepctx.host.python.code import CodeReader
from deepctx.host.python.discovery import find_interpreter
from deepctx.host.python.threads import ThreadMapper

TARGET = Path(__file__).resolve().parents[2] / "targets" / "python" / "named_threads.py"


@pytest.mark.parametrize("interp", [i for i in INTERPRETERS if i.path is not None][:2], ids=lambda i: i.id)
def test_freed_while_running_and_unknown_after_exit(interp) -> None:  # noqa: ANN001
    proc = subprocess.Popen([str(interp.path), str(TARGET)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, DEEPCTX_TARGET_SECONDS="60"))
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("ready")
        mem = ProcessMemory(proc.pid)
        py = find_interpreter(proc.pid, AddressSpace(read_maps(proc.pid)), mem)
        codes = CodeReader(mem, py)
        stack = userwalk.walk(mem, py, ThreadMapper(mem, py).snapshot()[proc.pid].tstate)
        code, tag = stack.frames[0].code, stack.frames[0].tag
        assert codes.get(code, tag) is not None and codes.failure(code, tag) is None
        # another object at a sampled code object's address: freed and reused
        assert codes.get(code, tag ^ 1) is None and codes.failure(code, tag ^ 1) == "freed"
        assert codes.get(py.runtime, 7) is None and codes.failure(py.runtime, 7) == "freed"  # not a code object
        proc.kill()
        proc.wait()
        assert codes.get(code, tag ^ 2) is None and codes.failure(code, tag ^ 2) == "exited"
        assert codes.failure(code, tag ^ 1) == "freed"  # what was decided while it ran stays
        # ... unless it was decided in the last moments before the exit was seen: the finalization freed it
        assert codes.exited(time.monotonic() + 3600, grace_s=1.0) == 0  # an hour later: nothing changes
        assert codes.failure(code, tag ^ 1) == "freed"
        assert codes.exited(time.monotonic(), grace_s=30.0) == 2  # tag ^ 1 and the runtime's address
        assert codes.failure(code, tag ^ 1) == "exited" and codes.failure(py.runtime, 7) == "exited"
        mem.close()
    finally:
        proc.kill()
        proc.wait()
