"""NVIDIA's management library (libnvidia-ml.so.1, through ctypes): the GPUs, which processes compute on
each, their MIG mode and their utilization samples (daemon/busy_meter.py, bench/nvml_trace.py).

DEEPCTX_NVML_LIB names another library (the tests' mock); the default is the driver's.
"""

from __future__ import annotations

import ctypes as ct
import os
from dataclasses import dataclass

LIBRARY = "libnvidia-ml.so.1"
SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_INSUFFICIENT_SIZE = 7
_UTILIZATION_SAMPLES = 1  # nvmlSamplingType_t NVML_GPU_UTILIZATION_SAMPLES
_CLOCK_MEM = 2  # nvmlClockType_t NVML_CLOCK_MEM
_NAME_LEN = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE


class NvmlError(Exception):
    """A failed NVML call, with its name and NVML's message."""

    def __init__(self, what: str, code: int, message: str) -> None:
        super().__init__(f"{what}: {message} (NVML {code})")
        self.code = code


class _Sample(ct.Structure):  # nvmlSample_t: the value is a union of 8 bytes (utilization: an unsigned int)
    _fields_ = [("ts_us", ct.c_ulonglong), ("value", ct.c_ulonglong)]


class _ProcessInfo(ct.Structure):  # nvmlProcessInfo_t (the _v3 calls' layout)
    _fields_ = [("pid", ct.c_uint), ("usedGpuMemory", ct.c_ulonglong), ("gpuInstanceId", ct.c_uint),
                ("computeInstanceId", ct.c_uint)]


class Nvml:
    """The library, initialized; close() shuts it down."""

    def __init__(self, path: str | None = None) -> None:
        path = path or os.environ.get("DEEPCTX_NVML_LIB") or LIBRARY
        try:
            self.lib = ct.CDLL(path)
        except OSError as e:
            raise NvmlError("load", -1, f"cannot load {path}: {e}") from None
        self.lib.nvmlErrorString.restype = ct.c_char_p
        self._check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        self._open = True

    def _check(self, rc: int, what: str) -> None:
        if rc != SUCCESS:
            raise NvmlError(what, rc, (self.lib.nvmlErrorString(rc) or b"?").decode(errors="replace"))

    def close(self) -> None:
        if self._open:
            self._open = False
            self.lib.nvmlShutdown()

    def devices(self) -> list[Device]:
        n = ct.c_uint(0)
        self._check(self.lib.nvmlDeviceGetCount_v2(ct.byref(n)), "nvmlDeviceGetCount_v2")
        out = []
        for i in range(n.value):
            h = ct.c_void_p()
            self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(ct.c_uint(i), ct.byref(h)),
                        "nvmlDeviceGetHandleByIndex_v2")
            out.append(Device(self, i, h))
        return out


@dataclass
class Device:
    nvml: Nvml
    index: int
    handle: ct.c_void_p

    def compute_pids(self) -> set[int]:
        """The processes with a compute context on this GPU (host pids)."""
        lib = self.nvml.lib
        n = ct.c_uint(0)
        rc = lib.nvmlDeviceGetComputeRunningProcesses_v3(self.handle, ct.byref(n), None)
        if rc == SUCCESS:
            return set()
        for _ in range(4):  # processes can come between the count and the read
            if rc != ERROR_INSUFFICIENT_SIZE:
                self.nvml._check(rc, "nvmlDeviceGetComputeRunningProcesses_v3")
            n = ct.c_uint(n.value + 8)
            buf = (_ProcessInfo * n.value)()
            rc = lib.nvmlDeviceGetComputeRunningProcesses_v3(self.handle, ct.byref(n), buf)
            if rc == SUCCESS:
                return {p.pid for p in buf[:n.value]}
        self.nvml._check(rc, "nvmlDeviceGetComputeRunningProcesses_v3")
        return set()

    def utilization_samples(self, since_us: int) -> list[tuple[int, int]]:
        """The GPU's utilization samples newer than since_us, oldest first: (wall-clock us, percent of the
        sampling period since the sample before in which a kernel ran). [] when there is none or NVML
        cannot say."""
        lib, kind, n = self.nvml.lib, ct.c_int(), ct.c_uint(0)
        rc = lib.nvmlDeviceGetSamples(self.handle, _UTILIZATION_SAMPLES, ct.c_ulonglong(since_us), ct.byref(kind),
                                      ct.byref(n), None)
        if rc != SUCCESS or not n.value:  # NVML_ERROR_NOT_FOUND: nothing new
            return []
        buf = (_Sample * n.value)()
        rc = lib.nvmlDeviceGetSamples(self.handle, _UTILIZATION_SAMPLES, ct.c_ulonglong(since_us), ct.byref(kind),
                                      ct.byref(n), buf)
        if rc != SUCCESS:
            return []
        return sorted((s.ts_us, s.value & 0xFFFFFFFF) for s in buf[:n.value] if s.ts_us > since_us)

    def name(self) -> str | None:
        buf = ct.create_string_buffer(_NAME_LEN)
        if self.nvml.lib.nvmlDeviceGetName(self.handle, buf, ct.c_uint(_NAME_LEN)) != SUCCESS:
            return None
        return buf.value.decode(errors="replace") or None

    def memory_bandwidth(self) -> int | None:
        """The memory's peak bandwidth in bytes a second: its bus width times its highest clock, two transfers a
        clock (HBM and GDDR alike: an H100 SXM's 5,120 bits at 2,619 MHz make its 3.35 TB/s). None where NVML
        cannot say."""
        width, clock = ct.c_uint(0), ct.c_uint(0)
        lib = self.nvml.lib
        if (lib.nvmlDeviceGetMemoryBusWidth(self.handle, ct.byref(width)) != SUCCESS
                or lib.nvmlDeviceGetMaxClockInfo(self.handle, _CLOCK_MEM, ct.byref(clock)) != SUCCESS):
            return None
        return width.value // 8 * clock.value * 1_000_000 * 2 or None

    def mig_enabled(self) -> bool:
        cur, pending = ct.c_uint(0), ct.c_uint(0)
        rc = self.nvml.lib.nvmlDeviceGetMigMode(self.handle, ct.byref(cur), ct.byref(pending))
        if rc == ERROR_NOT_SUPPORTED:
            return False
        self.nvml._check(rc, "nvmlDeviceGetMigMode")
        return bool(cur.value)


def devices_of(nvml: Nvml, pid: int) -> list[Device]:
    """The GPUs process pid (a host pid) has a compute context on."""
    return [d for d in nvml.devices() if pid in d.compute_pids()]
