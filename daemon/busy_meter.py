"""How busy a process's GPUs were while the duty cycle's probes were attached and while they were not, from
NVML's utilization samples: what `--gpu-duty` scales device times and GPU API call counts by.

Recording slows the job (uprobes on each GPU API call, CUPTI's callbacks and records), so the attached
shares see less work per second than the rest of the window. Scaled by time, the totals came out low by that
slowdown: on an H200 (ResNet-50 training) 2 to 9% sampled and 18 to 24% exact (BENCHMARKS.md). The GPU's
busy time is measured by the driver whether or not anything records, so the work the shares saw is the
busy rate inside them times their recorded time, and the window's work is its busy time:

    scale = busy seconds of the window / (busy rate while attached x seconds recorded)

(device times: the rate over the agent's recorded stretches; call counts: over the probes' attached ones).
So scaled, the H200's captures came within 1.5% sampled and 1% low to 6% high exact.

NVML's samples each give the percent of one sampling period (200 ms on an H200) in which a kernel ran, as
long as a share. Each sample's busy seconds are modelled as r_in x (its time attached) + r_out x (its time
detached), and the two rates fitted by least squares over the window; the duty cycle starts its shares at a
sample boundary (next_boundary) so that most shares hold one sample whole.

NVML's utilization is the device's: it is used only where the target is the only compute process NVML lists
on each GPU it uses and no GPU is in MIG mode. Elsewhere the scaling stays by time, and the profile says why.
"""

from __future__ import annotations

import bisect
import logging
import statistics
import time
from dataclasses import dataclass

from deepctx.daemon.nvml import Device, Nvml, NvmlError, devices_of

log = logging.getLogger("deepctx.capture")

_KEEP_S = 30.0  # samples older than this behind the newest are dropped (a window is 10 s)
MIN_ATTACHED_S = 0.1  # at least this much sampled time attached, or the fit is not trusted
MIN_BUSY_RATE = 0.02  # a GPU busier than this while attached, or there is nothing to scale by
FIND_EVERY_S = 1.0  # how often a process's GPUs are looked for until NVML lists it on one


Period = tuple[float, float, float]  # (from, to) on CLOCK_MONOTONIC s, and the share of it the GPU was busy


def busy_share(pct: int) -> float:
    """An NVML sample's percent as the share of its period the GPU was busy. NVML truncates: on the H200
    host (bench/nvml_rounding.py, BENCHMARKS.md), kernels calibrated to 15.7, 35.7 and 55.7% of every 10 ms
    read 15, 35 and 55 in 83 of 84 samples. So a reading of p stands for p to p + 1 percent, and its middle
    is the unbiased share where the fraction is spread evenly (a job's load, unlike that bench's, varies). A
    reading of 0 stays 0 (most are idle periods, which are exactly 0) and 100 stays 100."""
    if pct <= 0:
        return 0.0
    if pct >= 100:
        return 1.0
    return (pct + 0.5) / 100


@dataclass(frozen=True)
class BusyFit:
    """One window's fit, summed over the process's GPUs (busy seconds a second: up to one per GPU)."""

    busy_s: float  # the window's busy seconds
    attached_rate: float  # inside the stretches fitted (the probes attached, or the agent recording)
    detached_rate: float  # outside them
    samples: int  # samples that overlap the window
    attached_s: float  # sampled time inside the stretches (what attached_rate rests on)


@dataclass(frozen=True)
class BusyFits:
    """A window's fits over the GPU API probes' attached stretches (what the call counts saw) and over the
    agent's recorded ones (what the device times saw: it records from a little after the attach), or why
    there are none."""

    attached: BusyFit | None = None
    recording: BusyFit | None = None
    why: str = ""

    def stats(self) -> dict[str, int]:
        f = self.attached or self.recording
        if f is None:
            return {}
        out = {"gpu_busy_ms": round(1000 * f.busy_s), "gpu_busy_samples": f.samples}
        if self.attached is not None:
            out |= {"gpu_busy_attached_permille": round(1000 * self.attached.attached_rate),
                    "gpu_busy_detached_permille": round(1000 * self.attached.detached_rate)}
        if self.recording is not None:
            out["gpu_busy_recording_permille"] = round(1000 * self.recording.attached_rate)
        return out


def fit_rates(periods: list[Period], window: tuple[float, float], attached: list[tuple[float, float]],
              ) -> BusyFit | None:
    """Least-squares busy rates while attached and detached over one window; None without enough samples
    attached and detached to tell them apart."""
    w0, w1 = window
    attached = [(max(s, w0), min(e, w1)) for s, e in attached if min(e, w1) > max(s, w0)]
    # every sample that overlaps the window, whole: its time before or after the window is detached
    rows: list[tuple[float, float, float, float]] = []  # (time attached, detached, busy s, time in the window)
    for a, b, u in periods:
        inside = min(b, w1) - max(a, w0)
        if inside <= 0:
            continue
        t_in = sum(max(0.0, min(b, e) - max(a, s)) for s, e in attached)
        rows.append((t_in, (b - a) - t_in, u * (b - a), inside))
    if not rows:
        return None
    sii = sum(r[0] * r[0] for r in rows)
    soo = sum(r[1] * r[1] for r in rows)
    sio = sum(r[0] * r[1] for r in rows)
    det = sii * soo - sio * sio
    attached_s = sum(r[0] for r in rows)
    if attached_s < MIN_ATTACHED_S or det <= 1e-9 * max(sii * soo, 1e-12):
        return None
    siy = sum(r[0] * r[2] for r in rows)
    soy = sum(r[1] * r[2] for r in rows)
    r_in = max(0.0, (siy * soo - soy * sio) / det)
    r_out = max(0.0, (soy * sii - siy * sio) / det)
    # the window's busy time: a sample cut by its edge gives the part the rates put inside it
    busy_s = covered = 0.0
    for t_in, t_out, y, inside in rows:
        whole = r_in * t_in + r_out * t_out
        part = r_in * t_in + r_out * (inside - t_in)
        busy_s += y * (part / whole if whole > 0 else inside / (t_in + t_out))
        covered += inside
    busy_s *= (w1 - w0) / covered  # a gap between samples counted at their rate
    return BusyFit(busy_s, r_in, r_out, len(rows), attached_s)


class _DeviceSamples:
    """One GPU's utilization samples as periods on the monotonic clock, read as NVML adds them."""

    def __init__(self, dev: Device) -> None:
        self.dev = dev
        self.seen_us = 0
        self.last: tuple[float, float] | None = None  # the newest sample: (monotonic s, busy share)
        self.periods: list[Period] = []

    def poll(self) -> None:
        samples = self.dev.utilization_samples(self.seen_us)
        offset = time.time() - time.monotonic()  # NVML stamps its samples on the wall clock (us)
        for ts_us, pct in samples:
            self.seen_us = ts_us
            t, u = ts_us / 1e6 - offset, busy_share(pct)
            if self.last is not None and t > self.last[0]:
                self.periods.append((self.last[0], t, u))  # a sample is the busy share since the one before
            self.last = (t, u)
        if self.periods and self.periods[-1][1] - self.periods[0][0] > _KEEP_S:
            cut = bisect.bisect_left([p[0] for p in self.periods], self.periods[-1][1] - _KEEP_S)
            del self.periods[:cut]

    def period_s(self) -> float | None:
        if len(self.periods) < 3:
            return None
        return statistics.median(b - a for a, b, _ in self.periods[-20:])


class BusyMeter:
    """NVML's utilization samples of the GPUs one process computes on (see the module's doc)."""

    def __init__(self, nvml: Nvml, pid: int, devices: list[Device] | None = None) -> None:
        self.nvml, self.pid = nvml, pid
        self.devices = [_DeviceSamples(d) for d in devices or []]
        self.looked_at = -FIND_EVERY_S

    @classmethod
    def open(cls, pid: int) -> tuple[BusyMeter | None, str]:
        """A meter for process pid's GPUs (None when NVML cannot be used at all), and why its utilization
        cannot be used now ('' when it can). A meter is kept with a reason: each window checks again (a
        process found before it computes gets its GPUs later; another process may leave the GPU)."""
        try:
            nvml = Nvml()
        except NvmlError as e:
            return None, f"NVML is not available ({e})"
        meter = cls(nvml, pid)
        try:
            why = meter.check()
            meter.poll()
        except NvmlError as e:
            nvml.close()
            return None, f"NVML failed: {e}"
        return meter, why

    def _find(self) -> None:
        """The GPUs whose compute processes include this one, looked for at most every FIND_EVERY_S until
        found (a capture can start before its process has a CUDA context)."""
        if self.devices or time.monotonic() - self.looked_at < FIND_EVERY_S:
            return
        self.looked_at = time.monotonic()
        try:
            self.devices = [_DeviceSamples(d) for d in devices_of(self.nvml, self.pid)]
        except NvmlError as e:  # a failed look is not the capture's failure: check() says there is no GPU
            log.debug("NVML: no GPUs listed", extra={"pid": self.pid, "error": str(e)})

    def check(self) -> str:
        """Why the devices' utilization is not this process's alone ('' when it is)."""
        self._find()
        if not self.devices:
            return f"NVML lists no GPU that process {self.pid} computes on"
        for d in self.devices:
            if d.dev.mig_enabled():
                return f"GPU {d.dev.index} is in MIG mode (NVML's utilization is the whole GPU's)"
            others = sorted(d.dev.compute_pids() - {self.pid})
            if others:
                return (f"GPU {d.dev.index} is shared with process{'es' if len(others) > 1 else ''} "
                        f"{', '.join(map(str, others))} (NVML's utilization is the whole GPU's)")
        return ""

    def poll(self) -> None:
        self._find()
        for d in self.devices:
            d.poll()

    def next_boundary(self, t: float) -> float | None:
        """The first sample boundary at or after t (monotonic s), predicted from the newest sample and the
        sampling period; None before NVML has sampled enough."""
        if not self.devices:
            return None
        d = self.devices[0]  # one GPU's phase: the others' are their own, and most jobs use one
        period = d.period_s()
        if d.last is None or not period:
            return None
        k = max(0.0, -(-(t - d.last[0]) // period))
        return d.last[0] + k * period

    def fit(self, window: tuple[float, float], attached: list[tuple[float, float]],
            recording: list[tuple[float, float]]) -> BusyFits:
        """The window's fits over every GPU: inside the attached stretches, and inside the recorded ones."""
        self.poll()
        out, why = [], ""
        for stretches, what in ((attached, "the probes were attached"), (recording, "the agent recorded")):
            fit = self._fit(window, stretches) if stretches else None
            if stretches and fit is None:
                why = why or f"too few NVML samples while {what} to tell the rates apart"
            elif fit is not None and fit.attached_rate < MIN_BUSY_RATE * len(self.devices):
                why, fit = why or f"the GPU was nearly idle while {what}", None
            out.append(fit)
        return BusyFits(out[0], out[1], why)

    def _fit(self, window: tuple[float, float], stretches: list[tuple[float, float]]) -> BusyFit | None:
        fits = [fit_rates(d.periods, window, stretches) for d in self.devices]
        fs = [f for f in fits if f is not None]
        if len(fs) < len(fits):
            return None
        return BusyFit(sum(f.busy_s for f in fs), sum(f.attached_rate for f in fs), sum(f.detached_rate for f in fs),
                       sum(f.samples for f in fs), min(f.attached_s for f in fs))

    def close(self) -> None:
        self.nvml.close()
