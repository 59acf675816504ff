"""A capture of the GPU API and device families without the daemon: compose, attach, run one phase of
a target, flush the agent, and turn the maps into a calling context tree as deepctxd does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deepctx.daemon.callpaths import CallPathResolver
from deepctx.daemon.device_tree import add_device_buckets, cupti_kernel_names
from deepctx.daemon.gpu_tree import KernelNamer, add_gpu_buckets, library_basenames
from deepctx.daemon.origins import Origins
from deepctx.daemon.symbolize.native import NativeSymbolizer, SymbolCache
from deepctx.daemon.trace import build_trace, clock_offset_ns
from deepctx.daemon.tree import CallTree
from deepctx.host import procfs
from deepctx.probes import compose
from deepctx.probes.device_activity import DeviceActivity, DeviceBucket
from deepctx.probes.family import Target
from deepctx.probes.gpu_api import GpuApi


@dataclass
class Result:
    tree: CallTree
    stats: dict[str, int]
    buckets: list[DeviceBucket]
    names: dict[int, str]
    trace: list[dict[str, Any]] = field(default_factory=list)
    flushed: bool = False


def run_capture(pid: int, work: Callable[[], None], device: DeviceActivity, python: bool = True,
                before_flush: Callable[[Any], None] | None = None, gpu_mode: str = "exact",
                agent_calls: bool = False, after_flush: Callable[[Any], None] | None = None,
                stop: bool = False) -> Result:
    """agent_calls: launches and async copies/sets are left to the agent (GpuApi.agent_reports_calls).
    stop: after after_flush, the capture's end as deepctxd makes it (DeviceActivity.stop: the agent's last,
    forced flush)."""
    info = procfs.process_info(pid)
    target = Target(pid, info, procfs.AddressSpace(procfs.read_maps(pid)))
    families: list[Any] = []
    py = None
    if python:
        from deepctx.probes.python_stack import PythonStacks

        py = PythonStacks()
        py.prepare(target)
        families.append(py)
    gpu = GpuApi(mode=gpu_mode)
    gpu.agent_reports_calls = agent_calls
    gpu.prepare(target)
    device.prepare(target)
    device.agent_calls = agent_calls
    families += [gpu, device]
    bpf = compose.compile_program(families)
    offset = clock_offset_ns()
    try:
        for f in families:
            f.attach(bpf, target)
        work()
        if before_flush is not None:
            before_flush(bpf)
        flushed = device.flush(bpf, target)
        if after_flush is not None:
            after_flush(bpf)
        if stop:
            flushed = device.stop(bpf, target) and flushed
        for f in families:
            f.poll(bpf, target)
        tree = CallTree(info.command)
        stats: dict[str, int] = {}
        for f in families:
            stats.update(f.stats(bpf))
        native = NativeSymbolizer(SymbolCache(64))
        resolver = CallPathResolver(
            pid, target.space, lambda sid: gpu.user_stack(bpf, sid), native, {},
            read_python=(lambda sid: py.frames(bpf, target, sid)) if py else None,
            python_modules=py.interpreter_modules(pid) if py else None)
        buckets = [b for b in device.buckets(bpf) if b.pid == pid]
        names = device.names(bpf, pid, device.name_ids(buckets))
        namer = KernelNamer(pid, target.space, native, {**cupti_kernel_names(buckets, names),
                                                        **gpu.function_names(bpf)}, gpu.handle_strings(bpf))
        libs = library_basenames(target.space)
        gpu_buckets = [b for b in gpu.buckets(bpf) if b.pid == pid]
        origins = Origins([h.label for h in gpu.handoffs], gpu.node_types(bpf, pid))
        stats.update(add_gpu_buckets(tree, gpu_buckets, resolver, namer, lambda api: libs.get(api.library), origins))
        stats.update(add_device_buckets(tree, buckets, resolver, namer, lambda api: libs.get(api.library), names,
                                        origins))
        trace = build_trace(device.events, names, offset, pid) if device.trace else []
        return Result(tree, stats, buckets, names, trace, flushed)
    finally:
        for f in families:
            f.detach(bpf, target)
        compose.cleanup_program(bpf)
