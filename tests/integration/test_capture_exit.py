"""A windowed capture whose target exits while the duty cycle attaches its GPU probes again: the attach fails
on the gone process's files before the pidfd is looked at, and the capture must still end as target_exited
with its windows, not fail (on the GPU host, continuous captures lost their last window this way)."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import pytest
from harness import cuda_runtime

from deepctx.daemon.capture import Capture, CaptureOptions, CaptureResult
from deepctx.daemon.symbolize.native import SymbolCache
from deepctx.probes.gpu_api import GpuApi

TARGET = """
import ctypes, sys
ctypes.CDLL(sys.argv[1])  # the probes attach to the CUDA runtime it maps
print("ready", flush=True)
sys.stdin.read()  # until the test kills it
"""


def test_a_target_gone_as_its_gpu_probes_are_attached_again_ends_as_exited(monkeypatch: pytest.MonkeyPatch) -> None:
    child = subprocess.Popen([sys.executable, "-c", TARGET, cuda_runtime()], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        resumes: list[int] = []
        real_resume = GpuApi.resume

        def resume(self: GpuApi) -> None:
            resumes.append(child.pid)
            child.kill()  # gone, and reaped: its /proc entries with it
            child.wait()
            real_resume(self)  # attaches on /proc/PID/map_files/...: fails for real

        monkeypatch.setattr(GpuApi, "resume", resume)
        windows: list[CaptureResult] = []
        opts = CaptureOptions(duration_s=60, sample_hz=19, window_s=1.0, gpu_duty=0.5, gpu="on", python="off")
        cap = Capture(1, child.pid, opts, SymbolCache(), threading.Event(),
                      on_window=lambda result, *_: windows.append(result))
        progress: list[Any] = []
        result = cap.run(progress.append, lambda: False)
        assert resumes == [child.pid]  # the first window's cut attached them again, and that failed
        assert "gpu" in cap.probe_names
        assert result.ended == "target_exited"
        assert len(windows) == 1 and windows[0].ended == "window"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
