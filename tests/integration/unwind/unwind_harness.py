"""A perf-event sampler for one pid that calls native_stack_capture and, for contrast, the kernel's
frame-pointer walk (bpf_get_stackid with BPF_F_USER_STACK) on every sample."""

from __future__ import annotations

import ctypes as ct
import os
import select
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from bcc import BPF, PerfSWConfig, PerfType

from deepctx.host import procfs
from deepctx.probes.family import PROBES_DIR, Target
from deepctx.probes.native_unwind import NativeUnwinder, UnwindConfig

HARNESS_C = r"""
#include <uapi/linux/bpf_perf_event.h>

struct sample_key {
	__u64 native_id;
	__s64 fp_id;
	__u32 flags;
	__u32 pad;
};
BPF_HASH(samples, struct sample_key, __u64, 8192);
BPF_STACK_TRACE(fp_stacks, 8192);
BPF_PERCPU_ARRAY(timing, __u64, 2); /* [0] ns spent in native_stack_capture, [1] calls */

int on_sample(struct bpf_perf_event_data *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	if (pid != TARGET_PID)
		return 0;
	struct sample_key k = {};
	__u32 flags = 0;
	__u64 t0 = bpf_ktime_get_ns();
	k.native_id = native_stack_capture(&ctx->regs, pid, &flags, WALK_SLOT_IRQ);
	__u64 dt = bpf_ktime_get_ns() - t0;
	k.flags = flags;
	k.fp_id = fp_stacks.get_stackid(ctx, BPF_F_USER_STACK);
	samples.increment(k);
	int i0 = 0, i1 = 1;
	__u64 *ns = timing.lookup(&i0), *calls = timing.lookup(&i1);
	if (ns && calls) {
		*ns += dt;
		*calls += 1;
	}
	return 0;
}
"""


@dataclass
class Sample:
    native: list[int]
    flags: int
    fp: list[int]
    count: int


def start_target(argv: list[str], timeout: float = 10.0, stdin: bool = False) -> subprocess.Popen[bytes]:
    """Starts a target and waits (with a deadline) for its "ready" line on stdout."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE if stdin else None)
    try:
        wait_line(proc, b"ready", timeout)
    except BaseException:
        proc.kill()
        raise
    return proc


def wait_line(proc: subprocess.Popen[bytes], prefix: bytes, timeout: float = 10.0) -> bytes:
    """Reads the target's next stdout line, which must start with prefix, within timeout seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            raise TimeoutError(f"no {prefix!r} line from pid {proc.pid}")
        chunk = os.read(proc.stdout.fileno(), 1)
        if not chunk:
            raise RuntimeError(f"pid {proc.pid} exited with {proc.wait()}")
        line += chunk
    assert line.startswith(prefix), line
    return line


class Sampler:
    def __init__(self, pid: int, config: UnwindConfig | None = None, freq: int = 997, shared: bool = False,
                 cache: Any = None) -> None:
        """shared: the process's shared arrays (probes/unwind_maps.py), as deepctxd's programs use them; cache:
        a TableCache shared with other samplers, as the daemon's is (each gets its own by default)."""
        self.pid = pid
        self.unwinder = NativeUnwinder(config, cache=cache, shared=shared)
        self.target = Target(pid, procfs.process_info(pid), procfs.AddressSpace(procfs.read_maps(pid)))
        self.unwinder.prepare(self.target)
        cflags = [f"-D{k}={v}" for k, v in self.unwinder.defines().items()]
        cflags += [f"-I{PROBES_DIR}", f"-DTARGET_PID={pid}", "-w"]
        self.unwinder.before_compile()
        t0 = time.monotonic()
        self.bpf = BPF(text=(self.unwinder.source() + HARNESS_C).encode(), cflags=cflags)
        self.fn = self.bpf.load_func(b"on_sample", BPF.PERF_EVENT)
        self.load_seconds = time.monotonic() - t0
        self.unwinder.attach(self.bpf, self.target)
        self.bpf.attach_perf_event(
            ev_type=PerfType.SOFTWARE,
            ev_config=PerfSWConfig.CPU_CLOCK,
            fn_name=b"on_sample",
            sample_freq=freq,
            pid=pid,
        )

    def total(self) -> int:
        return sum(v.value for v in self.bpf[b"samples"].values())

    def collect(self, n: int, timeout: float = 30.0) -> list[Sample]:
        """Waits until n samples were taken (deadline: timeout seconds), then decodes them."""
        deadline = time.monotonic() + timeout
        while self.total() < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.total()} of {n} samples in {timeout} s")
            time.sleep(0.05)  # polling a condition, not a synchronization sleep
        self.bpf.detach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK)
        fp = self.bpf[b"fp_stacks"]
        out = []
        for k, v in self.bpf[b"samples"].items():
            native, flags = self.unwinder.stack(self.bpf, k.native_id) if k.native_id else ([], 0)
            fp_ips = list(fp.walk(k.fp_id)) if k.fp_id >= 0 else []
            out.append(Sample(native, flags, fp_ips, v.value))
        return out

    def ns_per_unwind(self) -> float:
        t = self.bpf[b"timing"]
        ns = sum(t[ct.c_int(0)])
        calls = sum(t[ct.c_int(1)])
        return ns / calls if calls else 0.0

    def close(self) -> None:
        self.unwinder.detach(self.bpf, self.target)
        self.unwinder.close()
        self.bpf.cleanup()


def share(samples: list[Sample], pred) -> float:
    total = sum(s.count for s in samples)
    return sum(s.count for s in samples if pred(s)) / total if total else 0.0


def histogram(samples: list[Sample], key) -> Counter:
    c: Counter = Counter()
    for s in samples:
        c[key(s)] += s.count
    return c
