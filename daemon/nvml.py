"""NVIDIA's management library (libnvidia-ml.so.1, through ctypes): which GPUs a process computes on, who
else does, and how busy they were between two instants (GPM, Hopper and later).

A duty cycle records device activity in short shares and scales what it recorded up to the capture. The job
runs slower while recorded (the probes and CUPTI cost each launch), so scaling by time alone comes out low
by that slowdown. The GPU's own busy time is not disturbed by recording: daemon/busy_meter.py scales by it.

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
GPM_METRIC_GRAPHICS_UTIL = 1  # "percentage of time any compute/graphics app was active on the GPU"
GPM_METRICS_GET_VERSION = 1
GPM_SUPPORT_VERSION = 1
_UUID_LEN = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE
_METRIC_SLOTS = 210  # NVML_GPM_METRIC_MAX of current headers (98 in older ones); only numMetrics are read


class NvmlError(Exception):
    """A failed NVML call, with its name and NVML's message."""

    def __init__(self, what: str, code: int, message: str) -> None:
        super().__init__(f"{what}: {message} (NVML {code})")
        self.code = code


class _ProcessInfo(ct.Structure):  # nvmlProcessInfo_t (the _v3 calls' layout)
    _fields_ = [("pid", ct.c_uint), ("usedGpuMemory", ct.c_ulonglong), ("gpuInstanceId", ct.c_uint),
                ("computeInstanceId", ct.c_uint)]


class _GpmSupport(ct.Structure):  # nvmlGpmSupport_t
    _fields_ = [("version", ct.c_uint), ("isSupportedDevice", ct.c_uint)]


class _MetricInfo(ct.Structure):
    _fields_ = [("shortName", ct.c_char_p), ("longName", ct.c_char_p), ("unit", ct.c_char_p)]


class _GpmMetric(ct.Structure):  # nvmlGpmMetric_t
    _fields_ = [("metricId", ct.c_uint), ("nvmlReturn", ct.c_int), ("value", ct.c_double),
                ("metricInfo", _MetricInfo)]


class _GpmMetricsGet(ct.Structure):  # nvmlGpmMetricsGet_t
    _fields_ = [("version", ct.c_uint), ("numMetrics", ct.c_uint), ("sample1", ct.c_void_p),
                ("sample2", ct.c_void_p), ("metrics", _GpmMetric * _METRIC_SLOTS)]


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

    def uuid(self) -> str:
        buf = ct.create_string_buffer(_UUID_LEN)
        self.nvml._check(self.nvml.lib.nvmlDeviceGetUUID(self.handle, buf, ct.c_uint(_UUID_LEN)), "nvmlDeviceGetUUID")
        return buf.value.decode()

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

    def mig_enabled(self) -> bool:
        cur, pending = ct.c_uint(0), ct.c_uint(0)
        rc = self.nvml.lib.nvmlDeviceGetMigMode(self.handle, ct.byref(cur), ct.byref(pending))
        if rc == ERROR_NOT_SUPPORTED:
            return False
        self.nvml._check(rc, "nvmlDeviceGetMigMode")
        return bool(cur.value)

    def gpm_supported(self) -> bool:
        s = _GpmSupport(version=GPM_SUPPORT_VERSION)
        rc = self.nvml.lib.nvmlGpmQueryDeviceSupport(self.handle, ct.byref(s))
        if rc == ERROR_NOT_SUPPORTED:
            return False
        self.nvml._check(rc, "nvmlGpmQueryDeviceSupport")
        return bool(s.isSupportedDevice)


class GpmSample:
    """One GPM sample of a device (the library's buffer, freed by close())."""

    def __init__(self, dev: Device) -> None:
        self.dev = dev
        self.ptr = ct.c_void_p()
        dev.nvml._check(dev.nvml.lib.nvmlGpmSampleAlloc(ct.byref(self.ptr)), "nvmlGpmSampleAlloc")
        try:
            dev.nvml._check(dev.nvml.lib.nvmlGpmSampleGet(dev.handle, self.ptr), "nvmlGpmSampleGet")
        except NvmlError:
            self.close()
            raise

    def close(self) -> None:
        if self.ptr:
            self.dev.nvml.lib.nvmlGpmSampleFree(self.ptr)
            self.ptr = ct.c_void_p()


def graphics_util(a: GpmSample, b: GpmSample) -> float:
    """The share of the time between two samples of one device that it ran work (0 to 1)."""
    req = _GpmMetricsGet(version=GPM_METRICS_GET_VERSION, numMetrics=1, sample1=a.ptr, sample2=b.ptr)
    req.metrics[0].metricId = GPM_METRIC_GRAPHICS_UTIL
    nvml = a.dev.nvml
    nvml._check(nvml.lib.nvmlGpmMetricsGet(ct.byref(req)), "nvmlGpmMetricsGet")
    nvml._check(req.metrics[0].nvmlReturn, "nvmlGpmMetricsGet(GRAPHICS_UTIL)")
    return min(1.0, max(0.0, req.metrics[0].value / 100.0))
