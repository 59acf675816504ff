"""The GPU probes' duty cycle (continuous windows, and `--gpu-duty` of one capture): when they are attached,
and how counts scale up."""

from __future__ import annotations

import ctypes as ct
import threading
import types
from types import SimpleNamespace

import pytest

from deepctx.daemon.device_share import DeviceShares
from deepctx.daemon.duty_cycle import DutyCycle
from deepctx.daemon.gpu_tree import scale_buckets
from deepctx.host import gpu_apis
from deepctx.probes.gpu_api import GpuBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeGpu:
    """Pausing and resuming take `takes` seconds of the clock; every call is noted in `calls`."""

    def __init__(self, clock: Clock | None = None, takes: float = 0.0, calls: list[str] | None = None,
                 name: str = "") -> None:
        self.calls: list[str] = [] if calls is None else calls
        self.clock, self.takes, self.prefix = clock, takes, f"{name} " if name else ""

    def pause(self, *_: object) -> None:
        self.calls.append(self.prefix + "pause")
        if self.clock:
            self.clock.now += self.takes

    def resume(self, *_: object) -> None:
        self.calls.append(self.prefix + "resume")
        if self.clock:
            self.clock.now += self.takes

    # as the device family: the agent's last flush and status, and the span of what it recorded
    flush = SimpleNamespace(unfinished=0, started_ns=0, active_ns=0, idle_ns=0)
    span = SimpleNamespace(first_start_ns=0, last_end_ns=0, records=0, device_ns=0, stale=0, stale_ns=0)

    def flush_state(self, *_: object) -> SimpleNamespace:
        return self.flush

    def take_span(self, *_: object) -> SimpleNamespace:
        return self.span

    launches = 0  # announced in the capture so far

    def correlations(self, *_: object) -> int:
        return self.launches


def test_attached_for_the_first_share_of_each_window() -> None:
    gpu = FakeGpu()
    d = DutyCycle(gpu, 0.25, 4.0, clock=Clock())  # type: ignore[arg-type]
    assert d.next_switch_s(0.0) == 1.0 and d.next_switch_s(0.4) == 0.6 and d.next_switch_s(1.5) == 2.5
    d.update(0.5)  # still in the attached share
    d.update(1.25)  # past it: detached
    d.update(3.0)
    assert gpu.calls == ["pause"]
    assert d.end_window(4.1) == 1.25  # attached from 0 to 1.25 s
    d.start_window(0.0)  # the next window starts attached
    assert gpu.calls == ["pause", "resume"]
    assert d.end_window(0.75) == 0.75  # a last window cut short while attached


def test_a_window_built_slowly_gets_its_whole_share_after_the_build() -> None:
    """A window starts at its predecessor's cut; its probes are attached once that one is built (0.6 s
    here), for the whole share from then on, even when the build took longer than the share."""
    gpu = FakeGpu()
    d = DutyCycle(gpu, 0.25, 4.0, clock=Clock())  # type: ignore[arg-type]
    d.update(1.0)
    assert d.end_window(4.0) == 1.0
    d.start_window(1.5)  # built for longer than the 1 s share
    assert gpu.calls == ["pause", "resume"]
    assert d.next_switch_s(1.5) == 1.0 and d.next_switch_s(2.6) == 1.4
    d.update(2.4)  # still attached
    d.update(2.5)
    assert gpu.calls == ["pause", "resume", "pause"]
    assert d.end_window(4.0) == 1.0  # from 1.5 to 2.5 s
    d.start_window(0.25)
    d.update(1.0)
    assert gpu.calls[-1] == "resume"  # the share is from 0.25 to 1.25 s
    assert d.end_window(1.125) == 0.875


def test_slow_switches_count_half_and_detaching_overlaps() -> None:
    """Detaching and attaching uprobes takes time: the probes count as attached from the middle of the one
    to the middle of the other. The GPU API probes are detached in a thread of their own while the agent
    hands over its records (their links' grace periods pass together)."""
    clock, calls = Clock(), []
    gpu = FakeGpu(clock, 0.4, calls, "gpu")
    dev = FakeGpu(clock, 0.1, calls, "device")
    threads: dict[str, bool] = {}
    lock = threading.Lock()  # the two pauses run at once and share the fake clock
    for fake, name in ((gpu, "gpu"), (dev, "device")):
        def pause(*_: object, fake: FakeGpu = fake, name: str = name) -> None:
            with lock:
                threads[name] = threading.current_thread() is threading.main_thread()
                FakeGpu.pause(fake)
        fake.pause = pause  # type: ignore[method-assign]
    d = DutyCycle(gpu, 0.25, 4.0, dev=dev, bpf=object(), target=object(), clock=clock)  # type: ignore[arg-type]
    d.update(1.0)  # pause: the agent's 0.1 s and the GPU probes' 0.4 s (the fake clock adds them up)
    assert sorted(calls) == ["device pause", "gpu pause"]
    assert threads == {"device": True, "gpu": False}
    assert d.end_window(4.0) == 1.25  # 0 to 1.0 + 0.5 / 2
    d.start_window(0.0)  # resume: 0.5 s in all, attached from 0.25 s
    d.update(2.0)  # pause again: 0.5 s, detached at 2.25 s
    assert calls[2:4] == ["gpu resume", "device resume"] and sorted(calls[4:]) == ["device pause", "gpu pause"]
    assert d.end_window(4.0) == 2.0


def test_counts_scale_up_to_the_window() -> None:
    api = gpu_apis.APIS[0]
    b = GpuBucket(1, 1, 0, 0, api, 0, 0, (1, 1, 1), (1, 1, 1), 0, 0, 0, calls=30, time_ns=1001, bytes=7)
    [s] = scale_buckets([b], 2.5)
    assert (s.calls, s.time_ns, s.bytes) == (75, 2502, 18)
    assert s.api is api and s.pid == 1


class FakeTable(dict):
    cleared = 0

    def clear(self) -> None:
        super().clear()
        self.cleared += 1


class FakeGeneration(dict):
    """A one-slot BPF array of a u64, indexed as bcc's are (ctypes keys and values)."""

    def __getitem__(self, key: ct.c_int) -> ct.c_uint64:
        return ct.c_uint64(self.get(key.value, 0))

    def __setitem__(self, key: ct.c_int, value: ct.c_uint64) -> None:
        super().__setitem__(key.value, value.value)


# a capture's target whose window cut noted no gone thread (gpu_thread_names: nothing to drop)
NO_NAMES_TAKEN = types.SimpleNamespace(pid=1)


def test_window_end_keeps_stack_ids_until_the_map_is_half_full() -> None:
    from deepctx.probes.gpu_api import GpuApi

    gpu = GpuApi(mode="sampled", stack_entries=8)
    bpf = {name: FakeTable() for name in (b"gpu_counts", b"gpu_stacks", b"gpu_origins", b"gpu_node_origins",
                                          b"gpu_node_runs")}  # keyed by bytes, as bcc wants its table names
    bpf[b"gpu_stacks_gen"] = FakeGeneration()
    bpf[b"gpu_stacks"].update({i: i for i in range(4)})
    bpf[b"gpu_origins"][1] = "origin holding stack 3"
    gpu.clear_window(bpf, NO_NAMES_TAKEN, stacks_free=True)  # type: ignore[arg-type]
    assert bpf[b"gpu_counts"].cleared == 0 and len(bpf[b"gpu_stacks"]) == 4 and bpf[b"gpu_origins"]  # ids stay valid
    bpf[b"gpu_stacks"][4] = 4  # more than half of 8
    gpu.clear_window(bpf, NO_NAMES_TAKEN, stacks_free=False)  # type: ignore[arg-type]  # another capture on it has counts to build
    assert len(bpf[b"gpu_stacks"]) == 5 and gpu.stack_clears == 0
    assert bpf[b"gpu_stacks_gen"][ct.c_int(0)].value == 0
    gpu.clear_window(bpf, NO_NAMES_TAKEN, stacks_free=True)  # type: ignore[arg-type]
    assert not bpf[b"gpu_stacks"] and not bpf[b"gpu_origins"] and gpu.stack_clears == 1
    # raised with the clear: no CPU takes the last stack it interned for one still kept
    assert bpf[b"gpu_stacks_gen"][ct.c_int(0)].value == 1


def test_a_failed_detach_in_the_gpu_probes_thread_is_raised_to_the_loop() -> None:
    class Failing(FakeGpu):
        def pause(self, *_: object) -> None:
            raise OSError(3, "gone")

    calls: list[str] = []
    dev = FakeGpu(calls=calls, name="device")
    d = DutyCycle(Failing(), 0.25, 4.0, dev=dev, bpf=object(), target=object(), clock=Clock())  # type: ignore[arg-type]
    with pytest.raises(OSError, match="gone"):
        d.update(1.0)
    assert calls == ["device pause"]  # the agent's pause ran all the same


def test_a_one_shot_capture_cycles_every_period() -> None:
    """`deepctx attach --gpu-duty 0.25 --gpu-duty-period 2`: on for the first 0.5 s of every 2 s period of one
    capture (no window cut attaches them again: the next period does)."""
    gpu = FakeGpu()
    d = DutyCycle(gpu, 0.25, 2.0, clock=Clock(), windowed=False)  # type: ignore[arg-type]
    assert d.next_switch_s(0.0) == 0.5 and d.next_switch_s(1.5) == 0.5
    d.update(0.25)
    d.update(0.5)  # the share is over
    d.update(1.9)
    assert gpu.calls == ["pause"]
    assert d.next_switch_s(1.9) == pytest.approx(0.1)
    d.update(2.1)  # the second period
    assert gpu.calls == ["pause", "resume"]
    assert d.next_switch_s(2.1) == pytest.approx(0.4)
    d.update(2.75)
    d.update(4.25)  # the third period, 0.25 s late: on for what is left of its share
    assert gpu.calls == ["pause", "resume", "pause", "resume"]
    d.update(5.0)  # off as late as the loop looks: the time on is what counts
    d.update(6.9)  # the fourth period's share went by between two looks: missed, not made up
    assert gpu.calls == ["pause", "resume", "pause", "resume", "pause"]
    d.update(8.1)
    assert gpu.calls[-1] == "resume"
    assert d.end_window(8.3) == pytest.approx(0.5 + 0.65 + 0.75 + 0.2)


def test_a_window_is_not_cycled_again_before_its_cut() -> None:
    """A windowed capture whose cut is late (the loop was busy past the window) does not attach its probes
    again at the end of the period: the cut does, once it is made."""
    gpu = FakeGpu()
    d = DutyCycle(gpu, 0.25, 4.0, clock=Clock())  # type: ignore[arg-type]
    d.update(1.5)
    d.update(4.3)  # past the window's end, not yet cut
    assert gpu.calls == ["pause"] and d.next_switch_s(4.3) == 0.0
    assert d.end_window(4.4) == 1.5


def test_each_share_keeps_what_the_agent_recorded_three_ways() -> None:
    """Attached at 100.0 s, the agent active from 100.06 s, the share's flush at 100.25 s and the pause from
    100.26 s; records from 100.09 s (the first's start) to 100.24 s (the last's end)."""
    ns = 1_000_000_000
    dev = FakeGpu()
    dev.flush = SimpleNamespace(unfinished=0, started_ns=int(100.25 * ns), active_ns=int(100.06 * ns), idle_ns=int(99.5 * ns))
    dev.span = SimpleNamespace(first_start_ns=int(100.09 * ns), last_end_ns=int(100.24 * ns), records=40,
                               device_ns=120_000_000, stale=2, stale_ns=9_000_000)
    dev.launches = 41
    shares = DeviceShares()
    shares.add(dev, None, 100.0, 100.26)
    assert shares.stats() == {"device_share_ms_active_to_flush": 190, "device_share_ms_first_record_to_flush": 160,
                              "device_share_ms_span": 150, "device_shares": 1, "device_share_records": 40,
                              "device_share_device_ms": 120, "device_share_stale_records": 2,
                              "device_share_stale_ms": 9, "device_shares_lost": 0, "device_recorded_ms": 160}
    # the agent went idle as the share ended (it saw the probes go): still active in it; nothing launched
    dev.flush = SimpleNamespace(unfinished=0, started_ns=int(102.25 * ns), active_ns=int(102.06 * ns), idle_ns=int(102.3 * ns))
    dev.span = SimpleNamespace(first_start_ns=0, last_end_ns=0, records=0, device_ns=0, stale=0, stale_ns=0)
    shares.add(dev, None, 102.0, 102.26)
    # it never became active in the share (idle since before it), no flush in it: nothing recorded
    dev.flush = SimpleNamespace(unfinished=0, started_ns=int(102.25 * ns), active_ns=int(102.06 * ns), idle_ns=int(102.3 * ns))
    shares.add(dev, None, 104.0, 104.1)
    # active, 7 launches announced, and no record handed over: lost, not an idle GPU; counts nothing
    dev.flush = SimpleNamespace(unfinished=0, started_ns=int(106.25 * ns), active_ns=int(106.06 * ns), idle_ns=int(102.3 * ns))
    dev.launches = 48
    shares.add(dev, None, 106.0, 106.26)
    # active, 5 launches, no record, and 3 records handed over unfinished at its stop (none of its work had
    # run: a share shorter than the GPU's queue): not lost, and counts nothing either
    dev.flush = SimpleNamespace(unfinished=3, started_ns=int(108.25 * ns), active_ns=int(108.06 * ns),
                                idle_ns=int(102.3 * ns))
    dev.launches = 53
    shares.add(dev, None, 108.0, 108.26)
    # recorded: the first share's first record to flush, the second's active to flush (no record), none x3
    assert shares.stats() == {"device_share_ms_active_to_flush": 760, "device_share_ms_first_record_to_flush": 160,
                              "device_share_ms_span": 150, "device_shares": 5, "device_share_records": 40,
                              "device_share_device_ms": 120, "device_share_stale_records": 2,
                              "device_share_stale_ms": 9, "device_shares_lost": 1, "device_recorded_ms": 350}
    assert shares.correlations_seen == 53 and shares.unfinished_seen == 3


def test_the_duty_cycle_measures_a_share_at_each_pause_and_at_the_end() -> None:
    clock = Clock()
    gpu, dev = FakeGpu(), FakeGpu()
    ns = 1_000_000_000
    dev.flush = SimpleNamespace(unfinished=0, started_ns=int(100.9 * ns), active_ns=int(100.1 * ns), idle_ns=0)
    dev.launches = 12  # announced in the first window; none in the second (an idle GPU there)
    d = DutyCycle(gpu, 0.25, 4.0, dev=dev, bpf=object(), target=object(), clock=clock)  # type: ignore[arg-type]
    clock.now = 101.0
    d.update(1.0)  # pause: the share from 100.0 (attached) to the flush at 100.9, active from 100.1
    clock.now = 104.0
    d.end_window(4.0)
    first = d.take_shares()
    assert first.shares == 1 and first.stats()["device_share_ms_active_to_flush"] == 800
    assert d.shares.correlations_seen == first.correlations_seen == 12  # counted on across windows
    d.start_window(0.0)  # attached again at 104.0
    dev.flush = SimpleNamespace(unfinished=0, started_ns=int(104.5 * ns), active_ns=int(104.2 * ns), idle_ns=int(101.0 * ns))
    clock.now = 104.6
    d.end_window(0.6)  # the capture ends inside the share: its last flush ended it
    assert d.take_shares().stats()["device_share_ms_active_to_flush"] == 300

