"""The GPU a profile ran on: its multiprocessor count, from the document's optional `device` part, else from
its name, else the H200's (the GPU deepctx is developed on), said so and trusted less; its memory's peak
bandwidth from the `device` part only (NVML's, read by the daemon), else unknown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_SM_COUNT = 132  # NVIDIA H200 (and H100 SXM)
# Multiprocessors per GPU model (vendor specifications), matched as substrings of the device name.
SM_COUNTS = (("H200", 132), ("H100 PCIe", 114), ("H100 NVL", 132), ("H100", 132), ("GH200", 132), ("B200", 148),
             ("A100", 108), ("A30", 56), ("A10G", 80), ("A10", 72), ("L40S", 142), ("L40", 142), ("L4", 58),
             ("V100", 80), ("T4", 40), ("RTX 4090", 128), ("RTX 3090", 82), ("MI300X", 304), ("MI250X", 220))


@dataclass(frozen=True)
class DeviceInfo:
    name: str | None
    sm_count: int
    source: str  # "profile", "name" or "default"
    memory_bandwidth: float | None = None  # bytes a second at the memory's peak; None: not in the profile

    @property
    def assumed(self) -> bool:
        return self.source == "default"


def device_info(doc: dict[str, Any]) -> DeviceInfo:
    dev = doc.get("device") or {}
    name = dev.get("name") if isinstance(dev, dict) else None
    sm = dev.get("sm_count") if isinstance(dev, dict) else None
    gbs = dev.get("memory_bandwidth_gb_s") if isinstance(dev, dict) else None
    bandwidth = float(gbs) * 1e9 if isinstance(gbs, int | float) and gbs > 0 else None
    if isinstance(sm, int) and sm > 0:
        return DeviceInfo(name, sm, "profile", bandwidth)
    if name:
        for model, count in SM_COUNTS:
            if model in name:
                return DeviceInfo(name, count, "name", bandwidth)
    return DeviceInfo(name, DEFAULT_SM_COUNT, "default", bandwidth)
