"""Scaling a duty cycle's shares by the GPU's busy time (daemon/busy_meter.py, daemon/duty_cycle.py): the
least-squares busy rates attached and detached from NVML-like samples, the scales they give, the shares'
alignment to sample boundaries, and the checks that keep another process's work out."""

from __future__ import annotations

import time

import pytest

from deepctx.daemon.busy_meter import FIND_EVERY_S, BusyFit, BusyFits, BusyMeter, fit_rates
from deepctx.daemon.duty_cycle import ATTACH_LEAD_S, DutyCycle, duty_scales


def samples(rate_in: float, rate_out: float, attached: list[tuple[float, float]], t0: float, t1: float,
            period: float, phase: float = 0.0) -> list[tuple[float, float, float]]:
    """What NVML would say of a GPU busy rate_in while attached and rate_out otherwise: each sample the busy
    share of its period."""
    out, a = [], t0 - phase
    while a < t1:
        b = a + period
        t_in = sum(max(0.0, min(b, e) - max(a, s)) for s, e in attached)
        out.append((a, b, (rate_in * t_in + rate_out * (period - t_in)) / period))
        a = b
    return out


def test_the_rates_of_aligned_and_unaligned_shares_come_out_exact() -> None:
    attached = [(0.0, 0.25), (2.03, 2.27), (4.11, 4.35), (6.18, 6.42)]  # some cut samples, some hold one
    periods = samples(0.55, 0.9, attached, 0.0, 8.0, 0.2, phase=0.07)
    fit = fit_rates(periods, (0.0, 8.0), attached)
    assert fit is not None
    assert fit.attached_rate == pytest.approx(0.55, abs=1e-9)
    assert fit.detached_rate == pytest.approx(0.9, abs=1e-9)
    t_in = sum(b - a for a, b in attached)
    assert fit.busy_s == pytest.approx(0.55 * t_in + 0.9 * (8.0 - t_in), abs=1e-9)
    assert fit.attached_s == pytest.approx(t_in, abs=1e-9)
    assert fit.samples == 41  # 40 periods from the phase, and one cut by the window's end


def test_no_fit_without_time_attached_or_detached() -> None:
    periods = samples(0.5, 0.5, [], 0.0, 4.0, 0.2)
    assert fit_rates(periods, (0.0, 4.0), []) is None  # nothing attached: the rates cannot be told apart
    assert fit_rates(periods, (0.0, 4.0), [(0.0, 4.0)]) is None  # nothing detached either
    assert fit_rates(periods, (0.0, 4.0), [(1.0, 1.05)]) is None  # 50 ms: less than MIN_ATTACHED_S
    assert fit_rates([], (0.0, 4.0), [(1.0, 2.0)]) is None


def test_scales_by_busy_time_where_fitted_by_time_elsewhere() -> None:
    fit = BusyFit(busy_s=8.0, attached_rate=0.5, detached_rate=0.9, samples=50, attached_s=1.0)
    s = duty_scales(10.0, 1.2, 1.0, BusyFits(attached=fit, recording=BusyFit(8.0, 0.4, 0.9, 50, 0.9)))
    # the work the shares saw: 0.4 busy s/s over 1 s recorded (device) and 0.5 over 1.2 s attached (calls)
    assert s.device == pytest.approx(8.0 / 0.4)
    assert s.calls == pytest.approx(8.0 / (0.5 * 1.2))
    assert s.warnings == []
    assert s.stats() == {"gpu_busy_scaled_permille": 1000, "device_busy_scaled_permille": 1000,
                         "device_time_scale_permille": 20000, "gpu_call_scale_permille": 13333,
                         "gpu_busy_ms": 8000, "gpu_busy_samples": 50, "gpu_busy_attached_permille": 500,
                         "gpu_busy_detached_permille": 900, "gpu_busy_recording_permille": 400}
    by_time = duty_scales(10.0, 1.2, 1.0, BusyFits(why="GPU 0 is in MIG mode"))
    assert (by_time.device, by_time.calls) == (pytest.approx(10.0), pytest.approx(10.0 / 1.2))
    assert by_time.stats()["gpu_busy_scaled_permille"] == 0 and "gpu_busy_ms" not in by_time.stats()
    assert len(by_time.warnings) == 1 and "by time, not by the GPU's busy time: GPU 0 is in MIG mode." in \
        by_time.warnings[0]
    # no share measured: device times scale as the calls do (the attached stretches stand in)
    s = duty_scales(10.0, 1.2, 0.0, BusyFits(attached=fit, recording=BusyFit(8.0, 0.4, 0.9, 50, 0.9)))
    assert s.device == s.calls == pytest.approx(8.0 / 0.6)
    assert s.stats()["gpu_busy_recording_permille"] == 500
    assert duty_scales(10.0, 0.0, 0.0, None).calls == 0.0


def test_a_busy_gpu_whose_shares_recorded_nothing_is_said() -> None:
    fit = BusyFit(busy_s=8.4, attached_rate=0.8, detached_rate=0.85, samples=50, attached_s=0.2)
    s = duty_scales(10.0, 0.2, 0.0, BusyFits(attached=fit), records=0)
    assert s.stats()["device_windows_unrecorded"] == 1
    assert s.warnings == ["the GPU was busy 8.4 s of this 10.0 s window, but the CUPTI agent recorded no device "
                          "work in its shares (it was not recording yet): the window holds no device times"]
    assert duty_scales(10.0, 0.2, 0.1, BusyFits(attached=fit), records=40).warnings == []  # recorded
    assert duty_scales(10.0, 0.2, 0.0, BusyFits(attached=fit), records=None).warnings == []  # no device family
    idle = BusyFit(busy_s=0.3, attached_rate=0.03, detached_rate=0.03, samples=50, attached_s=0.2)
    assert duty_scales(10.0, 0.2, 0.0, BusyFits(attached=idle), records=0).warnings == []  # 3% busy: nothing missed


class FakeMeter:
    """NVML samples every `period` s from 0.07 s on (monotonic); polls counted."""

    def __init__(self, period: float = 0.2) -> None:
        self.polls, self.period = 0, period

    def poll(self) -> None:
        self.polls += 1

    def next_boundary(self, t: float) -> float:
        k = -(-(t - 0.07) // self.period)
        return 0.07 + k * self.period

    def close(self) -> None:
        pass


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Gpu:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")


def test_a_one_shot_cycle_starts_each_share_just_before_a_sample_boundary() -> None:
    clock, gpu, meter = Clock(100.0), Gpu(), FakeMeter(0.3)
    d = DutyCycle(gpu, 0.1, 2.0, clock=clock, windowed=False, meter=meter)  # type: ignore[arg-type]
    starts = []
    t = 0.0
    while t < 8.0:
        clock.now = 100.0 + t
        was = d.on_since
        d.update(t)
        if was is None and d.on_since is not None:
            starts.append(round(100.0 + t, 6))
        t += d.next_switch_s(t) or 0.001
    # the first share is the capture's start; the others begin ATTACH_LEAD_S before the first boundary
    # ATTACH_LEAD_S or more after a period from the one before (boundaries at 0.07 + 0.3 k: 102.07, 104.17,
    # 106.27)
    assert starts == [pytest.approx(102.07 - ATTACH_LEAD_S), pytest.approx(104.17 - ATTACH_LEAD_S),
                      pytest.approx(106.27 - ATTACH_LEAD_S)]
    assert gpu.calls[:2] == ["pause", "resume"] and meter.polls > 0
    # the attached stretches the fit will use: from the capture's start, then each share
    assert d.attached[0] == (100.0, pytest.approx(100.2))
    assert [round(a, 6) for a, _ in d.attached[1:]] == starts[:len(d.attached) - 1]


def test_a_one_shot_cycle_without_a_meter_keeps_its_period() -> None:
    clock, gpu = Clock(100.0), Gpu()
    d = DutyCycle(gpu, 0.25, 2.0, clock=clock, windowed=False)  # type: ignore[arg-type]
    starts, t = [], 0.0
    while t < 7.0:
        clock.now = 100.0 + t
        was = d.on_since
        d.update(t)
        if was is None and d.on_since is not None:
            starts.append(round(t, 6))
        t += d.next_switch_s(t) or 0.001
    assert starts == [2.0, 4.0, 6.0]


def test_a_window_waits_for_a_sample_boundary_to_attach() -> None:
    clock, gpu, meter = Clock(100.0), Gpu(), FakeMeter()
    d = DutyCycle(gpu, 0.02, 10.0, clock=clock, meter=meter)  # type: ignore[arg-type]
    clock.now = 100.0
    d.update(0.0)
    clock.now = 100.2
    d.update(0.2)  # the first window's share ends
    assert gpu.calls == ["pause"]
    clock.now = 110.0
    assert d.end_window(10.0) == pytest.approx(0.2)
    clock.now = 110.3  # the window took 0.3 s to build
    d.start_window(0.3)
    assert gpu.calls.count("resume") == 0  # not yet: the next boundary is 110.47
    assert d.next_switch_s(0.3) == pytest.approx(110.47 - ATTACH_LEAD_S - 110.3)
    clock.now = 110.46
    d.update(0.46)
    assert gpu.calls.count("resume") == 1


class FakeDevice:
    def __init__(self, index: int, pids: set[int], mig: bool = False) -> None:
        self.index, self.pids, self.mig = index, pids, mig

    def mig_enabled(self) -> bool:
        return self.mig

    def compute_pids(self) -> set[int]:
        return self.pids


def meter_of(*devices: FakeDevice) -> BusyMeter:
    return BusyMeter(None, 42, list(devices))  # type: ignore[arg-type]


def test_another_process_or_mig_keeps_the_utilization_from_being_used() -> None:
    assert meter_of(FakeDevice(0, {42})).check() == ""
    assert meter_of(FakeDevice(0, {42}), FakeDevice(1, {42, 7, 9})).check() == \
        "GPU 1 is shared with processes 7, 9 (NVML's utilization is the whole GPU's)"
    assert meter_of(FakeDevice(2, {42, 7})).check() == \
        "GPU 2 is shared with process 7 (NVML's utilization is the whole GPU's)"
    assert meter_of(FakeDevice(0, {42}, mig=True)).check() == \
        "GPU 0 is in MIG mode (NVML's utilization is the whole GPU's)"


def test_without_nvml_the_meter_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPCTX_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
    meter, why = BusyMeter.open(42)
    assert meter is None
    assert why.startswith("NVML is not available (load: cannot load /nonexistent/libnvidia-ml.so.1")


class FakeNvml:
    def __init__(self, devices: list[FakeDevice]) -> None:
        self._devices = devices

    def devices(self) -> list[FakeDevice]:
        return self._devices


def test_a_process_found_before_it_computes_gets_its_gpus_later() -> None:
    """Continuous mode captures a process once it loads CUDA, maybe before it has a context on a GPU."""
    dev = FakeDevice(0, set())
    meter = BusyMeter(FakeNvml([dev]), 42)  # type: ignore[arg-type]
    assert meter.check() == "NVML lists no GPU that process 42 computes on"
    dev.pids = {42}
    assert meter.check() == "NVML lists no GPU that process 42 computes on"  # looked for at most every second
    meter.looked_at -= FIND_EVERY_S
    assert meter.check() == ""
    assert [d.dev for d in meter.devices] == [dev]


class SampledDevice:
    """A device whose NVML samples are given: (wall-clock us, percent)."""

    def __init__(self, samples: list[tuple[int, int]]) -> None:
        self.samples = samples

    def utilization_samples(self, since_us: int) -> list[tuple[int, int]]:
        return [s for s in self.samples if s[0] > since_us]


def test_a_truncated_reading_stands_for_the_middle_of_its_percent() -> None:
    """NVML truncates (H200: a calibrated 15.7% read 15): a reading of p is taken as p + 0.5 percent; idle
    (0) and full (100, or a reading beyond it) stay as they are."""
    from deepctx.daemon.busy_meter import _DeviceSamples, busy_share

    assert [busy_share(p) for p in (0, 1, 15, 99, 100, 120)] == [0.0, 0.015, 0.155, 0.995, 1.0, 1.0]
    now_us = int(time.time() * 1e6)
    dev = _DeviceSamples(SampledDevice([(now_us - 400_000, 0), (now_us - 200_000, 15), (now_us, 0)]))  # type: ignore[arg-type]
    dev.poll()
    assert [round(p[2], 6) for p in dev.periods] == [0.155, 0.0]
    assert [round(p[1] - p[0], 6) for p in dev.periods] == [0.2, 0.2]
