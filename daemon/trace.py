"""Trace mode: the events BPF emitted one by one (probes/device_activity.py TraceEvent) as the profile
document's optional "trace" part: CPU-side API calls with device work, and the kernels, copies, sets and
synchronizations on each (device, stream), linked by CUPTI's correlation id (docs/device-activity.md).

Event fields, all present on every event of its kind:
    api:                       kind, name, tid, start_ns, dur_ns, correlation
    kernel/memcpy/memset/sync: kind, name, device, stream, start_ns, dur_ns, correlation, bytes,
                               graph_node, tid (the launching thread, 0 when unknown)
start_ns counts from the Unix epoch (the kernel's CLOCK_MONOTONIC shifted by the offset measured when
the capture started); dur_ns is end - start."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from deepctx.host import gpu_apis
from deepctx.host.demangle import demangle
from deepctx.probes.device_activity import (
    COPY_KINDS,
    DEV_API_UNPROBED,
    DEV_EV_API,
    DEV_KIND_KERNEL,
    DEV_KIND_MEMCPY,
    DEV_KIND_MEMSET,
    DEV_KIND_SYNC,
    TraceEvent,
)

KINDS = {DEV_KIND_KERNEL: "kernel", DEV_KIND_MEMCPY: "memcpy", DEV_KIND_MEMSET: "memset", DEV_KIND_SYNC: "sync"}
# Kineto's names for synchronization records (CUpti_ActivitySynchronizationType)
SYNC_NAMES = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}


def clock_offset_ns() -> int:
    """Unix time minus CLOCK_MONOTONIC, now: adds to BPF's timestamps to give wall-clock ones."""
    return time.time_ns() - time.monotonic_ns()


def _api_name(e: TraceEvent, names: dict[int, str]) -> str:
    if e.name in names:
        return names[e.name]
    if e.api_id != DEV_API_UNPROBED and e.api_id < len(gpu_apis.APIS):
        return gpu_apis.APIS[e.api_id].display
    return "[CUDA call]"


def _record_name(e: TraceEvent, names: dict[int, str], demangled: dict[int, str]) -> str:
    if e.kind == DEV_KIND_KERNEL:
        if e.name not in demangled:
            raw = names.get(e.name)
            demangled[e.name] = demangle(raw) if raw else "[unnamed kernel]"
        return demangled[e.name]
    if e.kind == DEV_KIND_MEMCPY:
        return f"Memcpy {COPY_KINDS.get(e.copy_kind, 'unknown')}"
    if e.kind == DEV_KIND_MEMSET:
        return "Memset (Device)"
    return SYNC_NAMES.get(e.copy_kind, "Unknown Sync")


def build_trace(events: list[TraceEvent], names: dict[int, str], offset_ns: int, pid: int | None = None,
                where: Callable[[TraceEvent], str | None] | None = None) -> list[dict[str, Any]]:
    """The trace part: events of `pid` (all when None), sorted by start. names: name id -> string (the
    device family's names()); where(event) may give an API call's innermost Python line or frame, kept
    as "at"."""
    out: list[dict[str, Any]] = []
    demangled: dict[int, str] = {}
    for e in events:
        if pid is not None and e.pid != pid:
            continue
        base: dict[str, Any] = {"start_ns": e.start_ns + offset_ns, "dur_ns": max(0, e.end_ns - e.start_ns),
                                "correlation": e.correlation}
        if e.type == DEV_EV_API:
            ev = {"kind": "api", "name": _api_name(e, names), "tid": e.tid, **base}
            if where is not None:
                at = where(e)
                if at:
                    ev["at"] = at
        else:
            ev = {"kind": KINDS.get(e.kind, "kernel"), "name": _record_name(e, names, demangled),
                  "device": 0 if e.device == 0xFFFFFFFF else e.device, "stream": e.stream, **base,
                  "bytes": e.bytes, "graph_node": e.graph_node, "tid": e.tid}
        out.append(ev)
    out.sort(key=lambda ev: (ev["start_ns"], ev["kind"] != "api"))
    return out


def totals_by_kernel(trace: list[dict[str, Any]]) -> dict[str, int]:
    """Device time per kernel name in a trace part (what HTA's kernel breakdown sums)."""
    out: dict[str, int] = {}
    for ev in trace:
        if ev["kind"] == "kernel":
            out[ev["name"]] = out.get(ev["name"], 0) + ev["dur_ns"]
    return out
