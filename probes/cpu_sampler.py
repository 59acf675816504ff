"""Loader for cpu_sampler.bpf.c: perf cpu-clock sampling of target pids, counts per call path in BPF."""

from __future__ import annotations

import ctypes as ct
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepctx.probes.family import FamilyDefaults, Target, read_source
from deepctx.probes.maps import CountsMap, entry_count, percpu_sum
from deepctx.probes.program_share import share_of

MIN_SAMPLE_HZ = 1
MAX_SAMPLE_HZ = 10_000  # perf's default cap is 100 kHz, but beyond 10 kHz the probe itself dominates

# Mirrors of cpu_sampler.h (tests/unit/test_probe_layouts.py checks them against the C header).
SAMPLE_F_USER_STACK_LOST = 1 << 0
SAMPLE_F_KERNEL_MODE = 1 << 1
SAMPLE_F_PY_SHIFT = 8
SAMPLE_F_NATIVE_SHIFT = 16
SAMPLER_T_KERNEL_STACKS = 1 << 0

CPU_STAT_SAMPLES = 0
CPU_STAT_USER_STACK_LOST = 1
CPU_STAT_KERNEL_STACK_LOST = 2
CPU_STAT_COUNTS_FULL = 3
CPU_STAT__COUNT = 4

STAT_NAMES = {
    CPU_STAT_SAMPLES: "cpu_samples",
    CPU_STAT_USER_STACK_LOST: "cpu_user_stacks_lost",
    CPU_STAT_KERNEL_STACK_LOST: "cpu_kernel_stacks_lost",
    CPU_STAT_COUNTS_FULL: "cpu_samples_dropped_map_full",
}


class SampleKey(ct.Structure):
    _fields_ = [
        ("pid", ct.c_uint32),
        ("tid", ct.c_uint32),
        ("user_stack", ct.c_uint64),
        ("py_stack", ct.c_uint64),
        ("kernel_stack_id", ct.c_int32),
        ("flags", ct.c_uint32),
    ]


class SamplerTarget(ct.Structure):
    """A target's settings for one capture and its own counters (struct sampler_target, the value of
    `targets`)."""

    _fields_ = [("flags", ct.c_uint32), ("pad", ct.c_uint32), ("samples", ct.c_uint64),
                ("user_stacks_lost", ct.c_uint64), ("kernel_stacks_lost", ct.c_uint64),
                ("dropped_map_full", ct.c_uint64)]


# the target's own counters, by the names of the program's (STAT_NAMES)
TARGET_STATS = {"cpu_samples": "samples", "cpu_user_stacks_lost": "user_stacks_lost",
                "cpu_kernel_stacks_lost": "kernel_stacks_lost", "cpu_samples_dropped_map_full": "dropped_map_full"}


@dataclass(slots=True)  # one per map entry: not frozen (a frozen init sets every field via object.__setattr__)
class SampleBucket:
    pid: int
    tid: int
    user_stack: int
    py_stack: int
    kernel_stack_id: int
    flags: int
    count: int


@functools.cache  # read per stack when a profile is built: once is enough (the sysctl rarely changes)
def max_stack_depth() -> int:
    """Frames the kernel keeps per stack in the stack map (sysctl kernel.perf_event_max_stack)."""
    try:
        return int(Path("/proc/sys/kernel/perf_event_max_stack").read_text())
    except OSError:
        return 127


class CpuSampler(FamilyDefaults):
    """Probe family "cpu": a perf cpu-clock event on every CPU, filtered by a pid map in BPF."""

    name = "cpu"

    def __init__(self, sample_hz: int, kernel_stacks: bool = False, stack_entries: int = 16384,
                 count_entries: int = 65536, max_targets: int = 1024, windows: bool = False) -> None:
        if not MIN_SAMPLE_HZ <= sample_hz <= MAX_SAMPLE_HZ:
            raise ValueError(f"sample rate {sample_hz} Hz is out of range [{MIN_SAMPLE_HZ}, {MAX_SAMPLE_HZ}]")
        self.sample_hz = sample_hz
        self.kernel_stacks = kernel_stacks
        self.stack_entries = stack_entries
        self.count_entries = count_entries
        self.max_targets = max_targets
        self.max_depth = max_stack_depth()
        self._attached = False  # counted among the users of the program's perf events
        self.pid: int | None = None
        self._last: SamplerTarget | None = None  # the target's counters as its entry left `targets`
        self.counts = CountsMap("counts", windows)  # windows: continuous mode cuts them (two generations)
        self.stack_clears = 0

    def source(self) -> str:
        return read_source("cpu_sampler.bpf.c")

    def defines(self) -> dict[str, int | str]:
        """The daemon's map sizes only: the rate is the perf event's, kernel stacks a flag of the target."""
        return {
            "SAMPLER_STACK_ENTRIES": self.stack_entries,
            "SAMPLER_COUNT_ENTRIES": self.count_entries,
            "SAMPLER_COUNT_SPARE": self.counts.spare_entries(self.count_entries),
            "SAMPLER_MAX_TARGETS": self.max_targets,
        }

    def load(self, bpf: Any) -> None:
        from bcc import BPF

        bpf.load_func(b"on_cpu_sample", BPF.PERF_EVENT)

    def prepare(self, target: Target) -> None:
        pass

    def attach(self, bpf: Any, target: Target) -> None:
        from bcc import PerfSWConfig, PerfType

        self.pid = target.pid
        self.counts.bind(bpf)
        flags = SAMPLER_T_KERNEL_STACKS if self.kernel_stacks else 0
        bpf[b"targets"][ct.c_uint32(target.pid)] = SamplerTarget(flags)
        share = share_of(bpf)
        with share.lock:  # one perf event per CPU for every capture on the program (each samples its targets)
            if not self._attached:
                share.perf_users += 1
                if share.perf_users == 1:
                    bpf.attach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK,
                                          fn_name=b"on_cpu_sample", sample_freq=self.sample_hz)
                self._attached = True

    def stop_sampling(self, bpf: Any, pid: int) -> None:
        """Stops sampling pid (the maps stay readable); the perf events close with the program's last user."""
        from bcc import PerfSWConfig, PerfType

        own = self._own(bpf)
        if own is not None:
            self._last = own
        try:
            del bpf[b"targets"][ct.c_uint32(pid)]
        except KeyError:
            pass
        share = share_of(bpf)
        with share.lock:
            if self._attached:
                share.perf_users -= 1
                if share.perf_users == 0:
                    bpf.detach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK)
                self._attached = False

    def finish(self, bpf: Any, target: Target, exited: bool) -> None:
        self.stop_sampling(bpf, target.pid)

    def detach(self, bpf: Any, target: Target) -> None:
        self.stop_sampling(bpf, target.pid)  # where the capture failed before its end
        self.counts.forget(bpf, target.pid)

    def take_window(self, bpf: Any, target: Target, cut: int) -> None:
        """Continuous mode, at a window's cut: its counts leave the map, where the next window's start."""
        self.counts.take(bpf, target.pid, cut)

    def clear_window(self, bpf: Any, target: Target, stacks_free: bool) -> None:
        """Continuous mode, after a window was built. The stack map stays until it is half full: samples
        taken while the window was built are in the next one, and their stack ids must still name stacks
        (stacks_free: no capture on the program has counts left to build, probes/program_share.py)."""
        self.counts.release()
        if stacks_free and entry_count(bpf[b"stacks"]) > self.stack_entries // 2:
            bpf[b"stacks"].clear()
            self.stack_clears += 1

    def _own(self, bpf: Any) -> SamplerTarget | None:
        """The target's entry of `targets` (None: not attached, or gone)."""
        if self.pid is None:
            return None
        try:
            return SamplerTarget.from_buffer_copy(bytes(bpf[b"targets"][ct.c_uint32(self.pid)]))
        except KeyError:
            return None

    def samples(self, bpf: Any) -> int:
        return self.stats(bpf)["cpu_samples"]

    def stats(self, bpf: Any) -> dict[str, int]:
        """The target's own counters (the program's count every capture on it)."""
        own = self._own(bpf) or self._last
        if own is not None:
            out = {name: int(getattr(own, field)) for name, field in TARGET_STATS.items()}
        else:  # never attached: the program's
            table = bpf[b"cpu_stats"]
            out = {STAT_NAMES[i]: percpu_sum(table, i) for i in range(CPU_STAT__COUNT)}
        out["cpu_stack_map_entries"] = self.stack_entries
        out["cpu_stack_map_clears"] = self.stack_clears
        return out

    def buckets(self, bpf: Any) -> list[SampleBucket]:
        out = []
        for k, v in self.counts.items(bpf, self.pid):
            count = v if isinstance(v, int) else v.value
            out.append(SampleBucket(k.pid, k.tid, k.user_stack, k.py_stack, k.kernel_stack_id, k.flags, count))
        return out

    def user_stack(self, bpf: Any, stack_id: int) -> tuple[list[int], bool]:
        """IPs of a user stack, leaf first, and whether it was cut at the kernel's depth limit."""
        ips = list(bpf[b"stacks"].walk(stack_id))
        return ips, len(ips) >= self.max_depth

    def kernel_stack(self, bpf: Any, stack_id: int) -> list[int]:
        return list(bpf[b"stacks"].walk(stack_id)) if stack_id >= 0 else []
