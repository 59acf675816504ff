"""The GPU program's verifier budget: the kernel refuses a program whose verification walks more than 1M
instructions, and the exact-mode GPU program (Python walker, native unwinder, the GPU API probes, the CPU
sampler) once stood at 954K of it, so that any change to the walk failed to load. Its call path is now taken
at one place with nothing held across the walks; this keeps each program that a capture loads well inside the
bound, on this kernel, so that a change that doubles a walk's verification shows here and not as a capture
that fails to load (issue #31)."""

from __future__ import annotations

import ctypes as ct
import os
import re

import pytest

from deepctx.probes import compose
from deepctx.probes.cpu_sampler import CpuSampler
from deepctx.probes.device_activity import DeviceActivity
from deepctx.probes.gpu_api import GpuApi
from deepctx.probes.native_unwind import NativeUnwinder
from deepctx.probes.python_stack import PythonStacks
from deepctx.probes.uprobes import BPF_TRACE_UPROBE_SESSION, uprobe_sessions

BOUND = 1_000_000  # BPF_COMPLEXITY_LIMIT_INSNS
HEADROOM = 0.6  # each program within this share of the bound
# the GPU program with the .eh_frame continuation of the GEMM libraries' calls (on by default since 2026-12-06):
# its second native walk, 24 frames, verified behind the frame-pointer walk: 662K (2026-12-06)
CONTINUED_HEADROOM = 0.7


def processed(bpf: object, name: str, prog_type: int, attach_type: int = -1) -> int:
    """Instructions the verifier walked to load `name` (its log at level 1), the load checked."""
    from bcc import lib

    log = ct.create_string_buffer(1 << 24)
    fn = name.encode()
    module = bpf.module  # type: ignore[attr-defined]
    fd = lib.bcc_func_load(module, prog_type, fn, lib.bpf_function_start(module, fn),
                           lib.bpf_function_size(module, fn), lib.bpf_module_license(module),
                           lib.bpf_module_kern_version(module), 1, log, len(log), None, attach_type)
    text = log.value.decode(errors="replace")
    found = re.findall(r"processed (\d+) insns", text)
    assert fd >= 0, f"{name} did not load: {text[-600:]}"
    os.close(fd)
    assert found, text[-600:]
    return int(found[-1])


@pytest.mark.parametrize("mode", ["exact", "sampled"])
def test_the_gpu_program_verifies_well_inside_the_bound(mode: str) -> None:
    from bcc import BPF

    # as the daemon composes it: the .eh_frame continuation of the GEMM libraries' calls in (gpu_native_continue)
    families = [PythonStacks(max_depth=128), NativeUnwinder(cache=None, shared=False),
                GpuApi(mode=mode, native_continue=True), CpuSampler(99, False, 16384, 65536)]
    bpf = compose.compile_program(families)
    try:
        counts = {"on_gpu_api_entry": processed(bpf, "on_gpu_api_entry", BPF.KPROBE),
                  "on_cpu_sample": processed(bpf, "on_cpu_sample", BPF.PERF_EVENT)}
        if uprobe_sessions():
            counts["on_gpu_api_session"] = processed(bpf, "on_gpu_api_session", BPF.KPROBE,
                                                     BPF_TRACE_UPROBE_SESSION)
        print(f"{mode}: {counts}")
        limits = {"on_cpu_sample": HEADROOM}
        over = {k: v for k, v in counts.items() if v > limits.get(k, CONTINUED_HEADROOM) * BOUND}
        assert not over, f"verifier walked {counts} (bound {BOUND:,})"
    finally:
        compose.cleanup_program(bpf)


@pytest.mark.parametrize("windows", [False, True])
def test_the_device_programs_walk_a_call_path_well_inside_the_bound(windows: bool) -> None:
    """The agent's correlation probe takes the call path of a call the API probes do not track, with the same walks:
    it stood at 669K, the walks verified once for each way its branches reached them, and the Python walker's
    thread search (issue 35) took it past the bound (continuous captures with device activity failed to load)."""
    from bcc import BPF

    families = [PythonStacks(max_depth=128), NativeUnwinder(cache=None, shared=False),
                GpuApi(mode="sampled", native_continue=True), DeviceActivity(windows=windows),
                CpuSampler(99, False, 16384, 65536)]
    bpf = compose.compile_program(families)
    try:
        n = processed(bpf, "on_dev_correlation", BPF.KPROBE)
        print(f"on_dev_correlation (windows {windows}): {n:,} instructions")
        assert n <= HEADROOM * BOUND, f"verifier walked {n:,} instructions for on_dev_correlation (bound {BOUND:,})"
        # its paths continued by .eh_frame (a GEMM library's calls), in the program it calls by tail call
        w = processed(bpf, "on_dev_correlation_walk", BPF.KPROBE)
        print(f"on_dev_correlation_walk (windows {windows}): {w:,} instructions")
        assert w <= CONTINUED_HEADROOM * BOUND, f"verifier walked {w:,} instructions for on_dev_correlation_walk"
    finally:
        compose.cleanup_program(bpf)
