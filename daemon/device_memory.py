"""The peak memory bandwidth of the GPU a process computes on, from NVML (daemon/nvml.py): the analyzer weighs a
kernel's least bytes against its time with it (the compiled-hot-kernel rule). NVML is opened the first time a
profile with device activity is built and kept open; each GPU's bandwidth is read once."""

from __future__ import annotations

import logging
import threading

from deepctx.daemon.nvml import Nvml, NvmlError, devices_of

log = logging.getLogger("deepctx.device_memory")

_lock = threading.Lock()
_nvml: Nvml | None = None
_unavailable = False  # no NVML here (no NVIDIA driver): not tried again
_bandwidth: dict[int, int | None] = {}  # GPU index -> bytes a second


def memory_bandwidth(pid: int) -> int | None:
    """Bytes a second at the peak of the memory of the GPU that process pid computes on (the host's only GPU
    once the process is gone); None where NVML cannot say or several GPUs could be it."""
    global _nvml, _unavailable
    with _lock:
        if _unavailable:
            return None
        try:
            if _nvml is None:
                _nvml = Nvml()
            mine = devices_of(_nvml, pid)
            if not mine:  # gone by now: the host's only GPU, if it has one
                devices = _nvml.devices()
                mine = devices if len(devices) == 1 else []
            if not mine:
                return None
            dev = mine[0]
            if dev.index not in _bandwidth:
                _bandwidth[dev.index] = dev.memory_bandwidth()
            return _bandwidth[dev.index]
        except NvmlError as e:
            if _nvml is None:
                _unavailable = True
                log.info("no GPU memory bandwidth: NVML is not available", extra={"error": str(e)})
            return None
