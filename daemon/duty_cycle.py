"""The GPU probes' duty cycle (continuous windows, and `--gpu-duty` of one capture): when the GPU API probes
and the device-activity agent's are attached, and what the window's counts and device times are scaled up by
(daemon/device_share.py: how long the agent recorded; daemon/busy_meter.py: how much busier the GPU was
while they were not attached)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deepctx.daemon.busy_meter import BusyFit, BusyFits, BusyMeter
from deepctx.daemon.device_share import DeviceShares
from deepctx.probes.device_activity import DeviceActivity
from deepctx.probes.family import Target
from deepctx.probes.gpu_api import GpuApi

if TYPE_CHECKING:
    from deepctx.daemon.capture import Capture, CaptureOptions

log = logging.getLogger("deepctx.capture")

# A share starts this long before an NVML sample boundary: attaching takes about 20 ms, so the sample after
# it falls wholly inside the share (daemon/busy_meter.py)
ATTACH_LEAD_S = 0.02


@dataclass(frozen=True)
class DutyScales:
    """What a window's device times and GPU API call counts are multiplied by, seen in its shares."""

    device: float
    calls: float
    busy: BusyFits  # the fits each scale came from (None in it: that one is by time)
    duration: float = 0.0
    unrecorded_busy_s: float = 0.0  # the GPU's busy time in a window whose shares recorded no device work

    def stats(self) -> dict[str, int]:
        out = {"gpu_busy_scaled_permille": 1000 * (self.busy.attached is not None),
               "device_busy_scaled_permille": 1000 * (self.busy.recording is not None),
               "device_time_scale_permille": round(1000 * self.device),
               "gpu_call_scale_permille": round(1000 * self.calls)} | self.busy.stats()
        return out | ({"device_windows_unrecorded": 1} if self.unrecorded_busy_s else {})

    @property
    def warnings(self) -> list[str]:
        out = []
        if self.busy.why:
            out.append(f"GPU times and call counts are scaled up from the duty cycle's shares by time, not by the "
                       f"GPU's busy time: {self.busy.why}. A job that runs slower while recorded comes out low by "
                       "as much")
        if self.unrecorded_busy_s:
            out.append(f"the GPU was busy {self.unrecorded_busy_s:.1f} s of this {self.duration:.1f} s window, but the "
                       "CUPTI agent recorded no device work in its shares (it was not recording yet): the window "
                       "holds no device times")
        return out


def duty_scales(duration: float, probed_s: float, recorded_s: float, busy: BusyFits | None,
                records: int | None = None) -> DutyScales:
    """The scales of a window duration s long whose probes were attached probed_s and whose agent recorded
    recorded_s (daemon/device_share.py; 0: no share measured, the attached time stands in) and `records`
    records of device work (None: no device activity). By the GPU's busy time where it was fitted (the
    work the shares saw is the busy rate while they saw it times how long they saw it), by time otherwise.
    A GPU busy for 5% of the window or more while its shares recorded nothing is said (continuous mode finds
    processes before their agent records)."""
    busy = busy or BusyFits()
    recorded = recorded_s if recorded_s > 0 else probed_s

    def scale(fit: BusyFit | None, seen_s: float) -> float:
        if seen_s <= 0:
            return 0.0
        return fit.busy_s / (fit.attached_rate * seen_s) if fit is not None else duration / seen_s

    fit = busy.attached or busy.recording
    unrecorded = fit.busy_s if records == 0 and fit is not None and fit.busy_s >= 0.05 * duration else 0.0
    if recorded_s <= 0:  # no share measured: the attached stretches stand in for the recorded ones
        busy = BusyFits(busy.attached, busy.attached, busy.why)
    return DutyScales(scale(busy.recording, recorded), scale(busy.attached, probed_s), busy, duration, unrecorded)


class DutyCycle:
    """Attaches the GPU API probes (and the device activity agent's, which then stops CUPTI) for the first
    `share` of each cycle and detaches them for the rest, and keeps the time they were attached (what the
    counts and device times are scaled by). A windowed capture's cycle is its window (cut at window_s,
    which starts the next); a one-shot capture's cycles follow one another every period_s. With a busy
    meter, each share starts just before an NVML sample boundary, and each window ends with a fit of the
    GPU's busy rates (take_busy)."""

    def __init__(self, gpu: GpuApi, share: float, period_s: float, dev: DeviceActivity | None = None,
                 bpf: Any = None, target: Target | None = None, clock: Callable[[], float] = time.monotonic,
                 windowed: bool = True, meter: BusyMeter | None = None, meter_why: str = "") -> None:
        self.gpu, self.on_s, self.period_s = gpu, share * period_s, period_s
        self.windowed = windowed
        self.dev, self.bpf, self.target = dev, bpf, target
        self.clock = clock
        self.meter, self.meter_why = meter, meter_why
        self.probed_s = 0.0
        self.window_at = clock()  # the window's start, monotonic
        self.on_since: float | None = 0.0  # attached at the window's start
        self.attached: list[tuple[float, float]] = []  # the window's attached stretches, monotonic
        self.dev_attached_at: float | None = clock() if dev is not None else None  # the agent's probes, monotonic
        self.shares = DeviceShares()
        self.busy = BusyFits(why=meter_why)
        # seconds into the window when its first cycle began: a window starts when the last one was cut,
        # and its probes are attached again once that one is built
        self.on_from = 0.0

    @classmethod
    def of(cls, capture: Capture, opts: CaptureOptions) -> DutyCycle | None:
        gpu = next((f for f in capture.families if isinstance(f, GpuApi)), None)
        period = opts.window_s or opts.gpu_duty_period_s
        if gpu is None or not period or opts.gpu_duty >= 1.0:
            return None
        if not gpu.can_pause:  # probes attached one by one (no uprobe_multi): they stay, counts are whole
            if capture.target is not None:
                capture.target.warnings.append("GPU API probes cannot be detached on this kernel (no uprobe_multi): "
                                               "they stay attached for the whole capture, and its counts are whole")
            return None
        dev = next((f for f in capture.families if isinstance(f, DeviceActivity)), None)
        if dev is not None and dev.trace:
            dev = None  # trace mode: device activity stays on (probes attached one by one: pause() says no)
        meter, why = BusyMeter.open(capture.target.pid) if capture.target is not None else (None, "")
        log.info("GPU busy meter", extra={"pid": capture.pid, "meter": meter is not None, "why": why})
        return cls(gpu, opts.gpu_duty, period, dev, capture._bpf, capture.target, windowed=bool(opts.window_s),
                   meter=meter, meter_why=why)

    def close(self) -> None:
        if self.meter is not None:
            self.meter.close()
            self.meter = None

    def _phase(self, t: float) -> float:
        """Seconds into the current cycle (a window has one: its cut, not a new cycle, attaches them again);
        negative before the first cycle begins."""
        into = t - self.on_from
        return into if self.windowed or into < 0 else into % self.period_s

    def next_switch_s(self, t: float) -> float:
        phase = self._phase(t)
        if phase < 0:
            return -phase
        if phase < self.on_s:
            return self.on_s - phase
        # a window's probes are attached again when it is cut, a one-shot capture's when the next cycle starts
        return max(0.0, self.period_s - t) if self.windowed else self.period_s - phase

    def update(self, t: float) -> None:
        """t: seconds into the window."""
        # Attaching and detaching take time (uprobes on every GPU API function): the probes count as
        # attached from the middle of the one to the middle of the other.
        phase = self._phase(t)
        want = 0 <= phase < self.on_s
        if self.meter is not None:
            self.meter.poll()  # NVML keeps a bounded buffer of samples: read them as they come
        if want and self.on_since is None:
            started = self.clock()
            self.gpu.resume()
            if self.dev is not None and self.target is not None:
                self.dev.resume(self.bpf, self.target)
                self.dev_attached_at = self.clock()
            self.on_since = t + (self.clock() - started) / 2
            self._switched(True, started)
        elif not want and self.on_since is not None:
            started = self.clock()
            # The GPU API probes' links close in a thread of their own: their grace periods pass while the
            # agent hands over the records of the attached time and its links close.
            failed: list[BaseException] = []

            def gpu_pause() -> None:
                try:
                    self.gpu.pause()
                except BaseException as e:  # raised in the loop's thread below, as before
                    failed.append(e)

            gpu_off = threading.Thread(target=gpu_pause, name="deepctx-gpu-off", daemon=True)
            gpu_off.start()
            try:
                if self.dev is not None and self.target is not None:
                    self.dev.pause(self.bpf, self.target)
            finally:
                gpu_off.join()
            if failed:
                raise failed[0]
            self._device_share(started)
            off = t + (self.clock() - started) / 2
            self.probed_s += max(0.0, off - self.on_since)
            self.attached.append((self.window_at + self.on_since, self.window_at + off))
            self.on_since = None
            self._switched(False, started)
            if not self.windowed:
                self._align(t + (self.clock() - started))

    def _align(self, t: float) -> None:
        """A one-shot capture, just detached at t: its next cycle starts a period after this one did, or
        just before the first NVML sample boundary after that, so that the sample after the attach lies
        wholly inside the share (the phase is negative until then)."""
        phase = self._phase(t)
        start = t + (self.period_s - phase if phase >= 0 else -phase)
        boundary = self.meter.next_boundary(self.window_at + start + ATTACH_LEAD_S) if self.meter else None
        self.on_from = start if boundary is None else boundary - ATTACH_LEAD_S - self.window_at

    def _switched(self, attached: bool, started: float) -> None:
        """When the switch began and ended, on the monotonic clock (bench/duty_pairs.py pairs the target's
        steps with the attached and detached stretches by them)."""
        log.debug("GPU probes switched", extra={"pid": getattr(self.target, "pid", 0),
                                                "attached": attached, "from_mono": round(started, 6),
                                                "to_mono": round(self.clock(), 6)})

    def _device_share(self, ended_at: float) -> None:
        if self.dev is not None and self.dev_attached_at is not None:
            self.shares.add(self.dev, self.bpf, self.dev_attached_at, ended_at, getattr(self.target, "pid", 0))
        self.dev_attached_at = None

    def take_shares(self) -> DeviceShares:
        """What the agent recorded in the window's shares (end_window closed the last one)."""
        shares, self.shares = self.shares, DeviceShares(correlations_seen=self.shares.correlations_seen,
                                                   unfinished_seen=self.shares.unfinished_seen)
        return shares

    def take_busy(self) -> BusyFits:
        """The window's busy fits (end_window made them), or why there are none."""
        busy, self.busy = self.busy, BusyFits(why=self.meter_why)
        return busy

    def end_window(self, t: float) -> float:
        """The window's probed seconds (start_window attaches the probes for the next one)."""
        if self.on_since is not None:
            self._device_share(self.clock())
            self.probed_s += t - self.on_since
            self.attached.append((self.window_at + self.on_since, self.window_at + t))
        probed, self.probed_s = self.probed_s, 0.0
        self.on_since = None
        if self.meter is not None:
            window = (self.window_at, self.window_at + t)
            try:
                why = self.meter.check()  # a process that came onto the GPU meanwhile
                self.busy = BusyFits(why=why) if why else self.meter.fit(window, self.attached, self.shares.intervals)
            except Exception as e:  # NVML failed: time scaling, said in the profile
                self.busy = BusyFits(why=f"NVML failed: {e}")
            log.debug("GPU busy fit", extra={"pid": getattr(self.target, "pid", 0), "why": self.busy.why,
                                             "window_mono": [round(w, 6) for w in window],
                                             "attached_mono": [[round(a, 6), round(b, 6)] for a, b in self.attached],
                                             "recording_mono": [[round(a, 6), round(b, 6)]
                                                                for a, b in self.shares.intervals]}
                      | self.busy.stats())
        self.window_at += t
        self.attached = []
        return probed

    def start_window(self, t: float) -> None:
        """t seconds into a new window (the time its predecessor took to build): its share starts now, or just
        before the next NVML sample boundary."""
        self.on_from = t
        if self.meter is not None:
            boundary = self.meter.next_boundary(self.window_at + t + ATTACH_LEAD_S)
            if boundary is not None:
                self.on_from = boundary - ATTACH_LEAD_S - self.window_at
        self.update(t)
