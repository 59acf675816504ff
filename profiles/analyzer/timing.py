"""The time a profile's speedups are relative to, and what is known about the device's busy time.

A thread's active time is its CPU samples outside GPU API calls plus the time inside GPU API calls
(launches, copies, waits for the device), which the probes measure exactly; it leaves out the time the
thread slept on something else (a queue, a join, the next command). The critical thread is the thread with
the most active time: the main thread, unless it only waits for workers.

Each rule's model says which baseline T it needs (Rule.baseline):
- "critical": the critical thread's active time, or the device's busy time when the device was busier: the
  path a fix on one thread's work shortens;
- "wall": the capture's wall time: for costs summed over every thread, which no one thread's time bounds.
T is never more than the capture's duration. A fix that removes R of T makes the program T / (T - R) times
faster (Amdahl)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from deepctx.profiles.analyzer.index import ProfileIndex

DEVICE_KINDS = frozenset({"kernel", "memcpy", "memset"})
MAX_REMOVABLE = 0.95  # no estimate claims more than 20x: the rest of the program is never exactly zero


@dataclass(frozen=True)
class DeviceTime:
    """Busy time of the GPU(s): from the trace's intervals when there is one (exact, overlaps counted
    once), else the sum of gpu_time_ns (streams that overlap count twice), else unknown."""

    source: str  # "trace", "gpu_time" or "none"
    busy_ns: int = 0
    gpu_time_ns: int = 0
    intervals: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # device -> merged busy intervals

    @property
    def known(self) -> bool:
        return self.source != "none"


@dataclass(frozen=True)
class TimeBasis:
    time_ns: int
    host_ns: int  # the critical thread's active time
    main_tid: int | None
    device: DeviceTime
    source: str  # one sentence: where time_ns came from
    baseline: str = "critical"  # "critical" or "wall" (the module's docstring)
    critical_tid: int | None = None
    wall_ns: int = 0  # the capture's duration
    main_ns: int = 0  # the main thread's active time (the old baseline: said when it is not the critical one)

    def for_baseline(self, baseline: str) -> TimeBasis:
        """This basis as a rule whose model needs `baseline` sees it."""
        if baseline == self.baseline or baseline != "wall" or not self.wall_ns:
            return self
        return replace(self, time_ns=self.wall_ns, baseline="wall",
                       source=f"the capture's wall time ({self.wall_ns / 1e9:.3g} s)")

    @property
    def gpu_idle_ns(self) -> int | None:
        """The GPU's idle time within T (never negative); None when the device's busy time is unknown."""
        return max(0, self.time_ns - self.device.busy_ns) if self.device.known else None

    def speedup(self, removable_ns: float) -> float | None:
        if self.time_ns <= 0:
            return None
        r = min(max(0.0, removable_ns), MAX_REMOVABLE * self.time_ns)
        return round(self.time_ns / (self.time_ns - r), 2)

    def share(self, ns: float) -> float:
        return round(ns / self.time_ns, 4) if self.time_ns > 0 else 0.0


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Total length of the intersection of two merged interval lists."""
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def device_events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc.get("trace") or [] if e.get("kind") in DEVICE_KINDS and e.get("dur_ns", 0) > 0]


def device_time(doc: dict[str, Any], idx: ProfileIndex) -> DeviceTime:
    gpu_time = sum(r.gpu_time_ns for r in idx.gpu)
    events = device_events(doc)
    if events:
        per: dict[int, list[tuple[int, int]]] = {}
        for e in events:
            per.setdefault(int(e.get("device") or 0), []).append((int(e["start_ns"]), int(e["start_ns"]) + int(e["dur_ns"])))
        merged = {d: merge(v) for d, v in per.items()}
        busy = max(sum(hi - lo for lo, hi in v) for v in merged.values())
        return DeviceTime("trace", busy, gpu_time, merged)
    if gpu_time:
        return DeviceTime("gpu_time", gpu_time, gpu_time)
    return DeviceTime("none")


def active_ns(idx: ProfileIndex, tid: int) -> int:
    """A thread's active time: CPU samples outside GPU calls plus the measured time inside them."""
    t = idx.threads[tid]
    return int((t.samples - t.api_samples) * 1e9 / idx.sample_hz + t.api_time_ns) if idx.sample_hz > 0 else 0


# deepctx's own in-process agents (native/deepctx_cupti.c, deepctx_rocprof.c): never the program's critical path
AGENT_THREADS = ("deepctx-cupti", "deepctx-rocprof")


def critical_thread(idx: ProfileIndex) -> int | None:
    """The thread with the most active time, deepctx's agent threads left out; the main thread wins a tie."""
    if not idx.threads or idx.sample_hz <= 0:
        return None
    main = idx.main_tid
    program = [tid for tid, t in idx.threads.items() if not t.name.startswith(AGENT_THREADS)] or list(idx.threads)
    return max(program, key=lambda tid: (active_ns(idx, tid), tid == main, -tid))


def _thread_text(idx: ProfileIndex, tid: int) -> str:
    name = idx.threads[tid].name
    return f"thread {tid} ({name})" if name else f"thread {tid}"


def time_basis(doc: dict[str, Any], idx: ProfileIndex) -> TimeBasis:
    dev = device_time(doc, idx)
    duration_ns = int(float(doc.get("duration_s") or 0) * 1e9)
    main = idx.main_tid
    critical = critical_thread(idx)
    main_ns = active_ns(idx, main) if main is not None and main in idx.threads and idx.sample_hz > 0 else 0
    if idx.total_samples and critical is not None:
        host_ns = time_ns = active_ns(idx, critical)
        who = "main thread" if critical == main else "critical thread"
        source = f"{who} {critical}: CPU time outside GPU calls plus the time inside them"
        if critical != main and main is not None:
            source = (f"critical {_thread_text(idx, critical)}: CPU time outside GPU calls plus the time inside "
                      f"them; the main thread {main} was active {main_ns / 1e6:.3g} ms")
    else:
        host_ns = time_ns = duration_ns
        source = "capture duration (no CPU samples)"
    if dev.known and dev.busy_ns > time_ns:
        time_ns, source = dev.busy_ns, "GPU busy time (the device was busier than the critical thread)"
    if duration_ns and time_ns > duration_ns:
        time_ns, source = duration_ns, "capture duration"
    return TimeBasis(int(time_ns), int(host_ns), main, dev, source, "critical", critical, duration_ns, main_ns)
