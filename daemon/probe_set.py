"""The probe families of one capture: which ones a target gets, how they depend on each other, and how what
they aggregated becomes the capture's tree (#30.3).

daemon/capture.py drives a ProbeSet through the lifecycle of probes/family.py (attach, poll, windows, finish,
detach) without naming a family; this module is where the families are named. A new runtime's API probes
are entries in host/gpu_apis.py and host/gpu_runtimes.py (the GPU API family probes any of them); a new kind
of probe is a family (probes/<name>.py, .bpf.c, .h) plus its line in ProbeSet.choose and, when it adds to
the tree, in ProbeSet.build (docs/architecture.md, "Adding a runtime").
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deepctx.daemon.busy_meter import BusyFits
from deepctx.daemon.callpaths import CallPathResolver, StackReader
from deepctx.daemon.compiled_tree import annotate_compiled, compiled_warnings
from deepctx.daemon.device_memory import memory_bandwidth
from deepctx.daemon.device_share import DeviceShares
from deepctx.daemon.device_tree import DeviceView
from deepctx.daemon.duty_cycle import duty_scales
from deepctx.daemon.errors import FailedPrecondition
from deepctx.daemon.gpu_tree import KernelNamer, add_gpu_buckets, library_basenames, scale_buckets
from deepctx.daemon.inject import agent as agent_injector
from deepctx.daemon.inject.agent import agent_error, agent_state
from deepctx.daemon.origins import Origins
from deepctx.daemon.probe_samples import ProbeSamples
from deepctx.daemon.store.deltas import is_running_total
from deepctx.daemon.symbolize.native import NativeSymbolizer, SymbolCache
from deepctx.daemon.trace import build_trace
from deepctx.daemon.tree import CallTree
from deepctx.daemon.unwind_stops import stop_marker
from deepctx.host import procfs
from deepctx.host.frames import DEEPCTX_PROBE, Frame
from deepctx.host.torch_compile import Compile
from deepctx.probes import programs
from deepctx.probes.cpu_sampler import (
    SAMPLE_F_KERNEL_MODE,
    SAMPLE_F_USER_STACK_LOST,
    TARGET_STATS,
    CpuSampler,
)
from deepctx.probes.device_activity import AgentUnusable, DeviceActivity, agent_mappings
from deepctx.probes.family import ProbeFamily, Target
from deepctx.probes.gpu_api import GpuApi, HandoffPoint, builtin_handoffs, continued_mappings
from deepctx.probes.pc_sampling import PcsOptions

if TYPE_CHECKING:
    from deepctx.daemon.capture import CaptureOptions
    from deepctx.probes.native_unwind import NativeUnwinder

log = logging.getLogger("deepctx.capture")


def pc_options(opts: CaptureOptions) -> PcsOptions | None:
    """The request's PC-sampling options (`deepctx attach --pc-sampling`): a client's request carries them on
    RequestOptions (daemon/request_options.py; CaptureOptions is the capture engine's); None: none asked, and
    the target's environment decides (`deepctx run --pc-sampling`)."""
    from deepctx.daemon.request_options import RequestOptions  # it extends capture.py's, which imports this

    return opts.pc_sampling if isinstance(opts, RequestOptions) else None


@dataclass
class BuildInputs:
    """What the capture hands the build besides the maps: the live process's facts and the duty cycle's."""

    thread_names: dict[int, str]
    symbolizer: NativeSymbolizer
    duration_s: float
    gpu_frames: dict[int, list[Frame]] = field(default_factory=dict)  # resolved ahead (read_ahead)
    resolved_ahead: int = 0
    gpu_probed_s: float | None = None  # seconds the GPU probes were attached in the window (duty cycle)
    device_shares: DeviceShares | None = None
    gpu_busy: BusyFits | None = None
    clock_offset_ns: int = 0


@dataclass
class Built:
    """A capture's tree and what goes with it into its result."""

    tree: CallTree
    stats: dict[str, int]
    warnings: list[str]
    mode: str
    trace: list[dict[str, Any]]
    hostname: str = field(default_factory=socket.gethostname)
    compiles: list[Compile] = field(default_factory=list)  # torch.compile's, from the process's trace


class ProbeSet:
    """The families of one capture, in program order (helpers before their users, the sampler last)."""

    def __init__(self, opts: CaptureOptions, families: list[ProbeFamily]) -> None:
        self.opts = opts
        self.families = families
        self.attach_s: dict[str, float] = {}  # per family: where an attach's time goes ("probes ready" logs it)

    # --- choosing ------------------------------------------------------------------------------------

    @classmethod
    def choose(cls, opts: CaptureOptions, target: Target, symbols: SymbolCache, unwind_tables: Any) -> ProbeSet:
        """The families the target gets (FailedPrecondition where the capture asked for one it cannot have)."""
        families: list[ProbeFamily] = []
        if opts.python != "off":
            py = cls._python(opts)
            try:
                py.prepare(target)
                families.append(py)
            except ValueError as e:
                if opts.python == "on":
                    raise FailedPrecondition(str(e)) from e
                if "not a python process" not in str(e).lower():
                    target.warnings.append(f"Python frames unavailable: {e}")
        if opts.native_unwind:
            unwinder = cls._unwinder(unwind_tables)
            try:
                unwinder.prepare(target)
                families.append(unwinder)
            except ValueError as e:
                target.warnings.append(f"DWARF unwinding unavailable, frame pointers only: {e}")
        gpu: GpuApi | None = None
        if opts.gpu != "off":
            gpu = cls._gpu(opts, symbols)
            try:
                gpu.prepare(target)
                families.append(gpu)
            except ValueError:
                gpu = None  # no GPU library loaded, and none asked for
            if gpu is not None and gpu.native_continue:  # its stacks' continuations are the unwinder's
                gpu.unwinder = next((f for f in families if f.name == "native_unwind"), None)
                # only where a GEMM library is mapped (PyTorch maps cuBLAS at its import): elsewhere the program
                # without it, which loads faster (the CI target's cold attach 1.54 s against 1.94 s: BENCHMARKS.md)
                gpu.native_continue = gpu.unwinder is not None and bool(continued_mappings(target))
        dev = cls._device(opts, target, gpu)
        if dev is not None:
            families.append(dev)
        sampler = cls.sampler_of(opts)
        sampler.prepare(target)
        families.append(sampler)
        return cls(opts, families)

    @classmethod
    def common_programs(cls, opts: CaptureOptions, symbols: SymbolCache, unwind_tables: Any,
                        continued: bool = False) -> list[list[ProbeFamily]]:
        """The family lists of the programs most captures with these options take (a Python process with and
        without a GPU runtime; continued: and one with a GEMM library, whose program has the .eh_frame
        continuation), for the daemon to compile and load when it starts (probes/programs.py)."""
        head: list[ProbeFamily] = []
        if opts.python != "off":
            head.append(cls._python(opts))
        if opts.native_unwind:
            head.append(cls._unwinder(unwind_tables))
        out = [[*head, cls.sampler_of(opts)]]
        if opts.gpu != "off":
            # a GPU process without a GEMM library; with one (PyTorch's and JAX's map cuBLAS at their import) only
            # where asked: its program's maps hold about 120 MB of kernel memory more while idle
            plain = cls._gpu(opts, symbols)
            plain.native_continue = False
            out.insert(0, [*head, plain, cls.sampler_of(opts)])
            if continued and opts.gpu_native_continue and opts.native_unwind:
                out.insert(1, [*head, cls._gpu(opts, symbols), cls.sampler_of(opts)])
        return out

    @staticmethod
    def handoff_points(config_entries: list[dict[str, Any]]) -> tuple[HandoffPoint, ...]:
        """The config's handoff_points entries, as the GPU API family takes them."""
        return tuple(HandoffPoint(**p) for p in config_entries)

    @staticmethod
    def _python(opts: CaptureOptions) -> ProbeFamily:
        from deepctx.probes.python_stack import PythonStacks

        return PythonStacks(max_depth=opts.python_max_depth)

    @staticmethod
    def _unwinder(unwind_tables: Any) -> ProbeFamily:
        return ProbeSet.unwinder(unwind_tables)

    @staticmethod
    def unwinder(unwind_tables: Any) -> NativeUnwinder:
        """The native unwinder family as every capture's: on the daemon's arrays (probes/unwind_maps.py)."""
        from deepctx.probes.native_unwind import NativeUnwinder

        return NativeUnwinder(cache=unwind_tables, shared=True)

    @staticmethod
    def _gpu(opts: CaptureOptions, symbols: SymbolCache) -> GpuApi:
        return GpuApi(mode=opts.gpu_mode, required=opts.gpu == "on", sampled_paths_per_s=opts.gpu_sampled_paths_per_s,
                      count_entries=opts.count_map_entries, stack_entries=opts.stack_map_entries,
                      symbol_cache=symbols, handoffs=builtin_handoffs(opts.autograd_nodes) + opts.handoff_points,
                      windows=bool(opts.window_s), api_time_every=opts.gpu_api_time_every,
                      native_continue=opts.gpu_native_continue and opts.native_unwind)

    @staticmethod
    def sampler_of(opts: CaptureOptions) -> CpuSampler:
        return CpuSampler(opts.sample_hz, opts.kernel_stacks, opts.stack_map_entries, opts.count_map_entries,
                          windows=bool(opts.window_s))

    @staticmethod
    def _device(opts: CaptureOptions, target: Target, gpu: GpuApi | None) -> DeviceActivity | None:
        """Device activity, after the GPU API probes it joins with: the target's CUPTI agent, or (asked
        for) one loaded into it at attach."""
        asked = opts.gpu_activity == "on" or opts.trace
        if opts.gpu_activity == "off":
            return None
        if gpu is None:
            if asked:
                raise FailedPrecondition("device activity needs the GPU API probes, and the process has no GPU "
                                         "runtime library loaded")
            return None
        # auto and on alike: the CUPTI agent takes them (the rocprofiler-sdk agent's HIP calls keep uprobes)
        agent_calls = not opts.trace and opts.agent_calls != "off"
        dev = DeviceActivity(trace=opts.trace, inject=asked, injector=agent_injector,
                             count_entries=opts.count_map_entries, windows=bool(opts.window_s),
                             flush_timeout_s=opts.flush_timeout_s, pc_options=pc_options(opts))
        # a duty cycle measures what each attached share recorded (daemon/device_share.py): records widen dev_span
        dev.spans = opts.gpu_duty < 1.0 and not opts.trace
        try:
            dev.prepare(target)
        except ValueError as e:
            if asked:
                raise FailedPrecondition(f"no device activity: {e}") from e
            if isinstance(e, AgentUnusable):
                target.warnings.append(f"no device activity: {e}")
            return None
        # An agent yet to come leaves launches to the uprobes: if it fails to start, nothing would count them.
        gpu.agent_reports_calls = dev.agent_calls = agent_calls and dev.agent_kind == "cupti" and not dev.expected_agent
        if dev.expected_agent:
            log.info("device activity once the agent loads", extra={"pid": target.pid, "agent": dev.expected_agent})
        dev.sampling = dev.agent_calls and gpu.mode == "sampled"  # the agent samples what it alone reports
        dev.continued = gpu.native_continue  # the paths it takes go on as the GPU API probes' do
        return dev

    def _first(self, kind: type) -> Any:
        return next((f for f in self.families if isinstance(f, kind)), None)

    def share_key(self) -> str | None:
        """The key captures at once join one loaded program by (probes/programs.py): the same program and the
        settings it holds for all of them (the perf events' rate, the GPU probes' sampling interval), and the
        same windows (continuous mode's are cut at the same instants: daemon/capture.py; one-shot captures
        cut none). Device activity's program is its capture's own: its ring buffers, flush state and agent
        settings are one per program."""
        if self._first(DeviceActivity) is not None:
            return None
        return f"{programs.program_key(self.families)}:{self.opts.sample_hz}:{self.opts.window_s:g}:{self.opts.gpu_mode}"

    def program_totals(self, bpf: Any) -> dict[str, int]:
        """The running totals of the program's own counters (BPF per-CPU arrays, the families' counters):
        what a capture that joins a program in use counts its stats from. The CPU sampler's are its
        target's own (cpu_sampler.TARGET_STATS), counted from its attach already."""
        return {k: v for k, v in self.stats(bpf).items() if is_running_total(k) and k not in TARGET_STATS}

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.families]

    @property
    def maps_refresh_s(self) -> float:
        """How often the target's mappings are read again: GPU probes must see libraries loaded after attach
        (dlopen) quickly."""
        return 0.5 if self._first(GpuApi) is not None else 1.0

    # --- the lifecycle ------------------------------------------------------------------------------

    def attach(self, bpf: Any, target: Target) -> None:
        # device activity last: its agent records from its attach, and the capture's duration counts from after
        # the last attach (on the H200 host the agent started 0.35 to 0.5 s before the duration did, GPU work
        # recorded outside it); a `deepctx run` target waits for it until then
        gpu = self._first(GpuApi)
        for fam in sorted(self.families, key=lambda f: isinstance(f, DeviceActivity)):
            if isinstance(fam, DeviceActivity) and gpu is not None:  # the GPU family's slot for the process
                fam.cont_slot = gpu.continued_slot(target.pid)
            t0 = time.monotonic()
            fam.attach(bpf, target)
            self.attach_s[fam.name] = round(time.monotonic() - t0, 3)
        self._check_agent_reports(bpf, target)

    def _check_agent_reports(self, bpf: Any, target: Target) -> None:
        """Launches left to the CUPTI agent, and the agent failed to start: the uprobes take them."""
        gpu, dev = self._first(GpuApi), self._first(DeviceActivity)
        if gpu is None or dev is None or not gpu.agent_reports_calls:
            return
        status = dev.flush_state(bpf).status
        maps = procfs.read_maps(target.pid) if status == 0 else []
        mapped = agent_mappings(maps)
        if mapped:  # no status probe yet: the agent's own word (one that failed at cuInit says no more)
            status = agent_state(target.pid, maps, mapped[0].path) or 0
        if status < 0:
            gpu.probe_agents_calls()
            dev.agent_calls = False
            dev.write_config(bpf)
            target.warnings.append("the CUPTI agent did not start: launches are probed by uprobes instead")
            self._agent_said(target, maps)

    @staticmethod
    def _agent_said(target: Target, maps: list[procfs.Mapping]) -> None:
        """The failed agent's own words (its deepctx_agent_error: which CUPTI call, which error) in the warnings,
        once: the status alone says only what kind of failure it was."""
        mapped = agent_mappings(maps)
        detail = agent_error(target.pid, maps, mapped[0].path) if mapped else ""
        said = f"the CUPTI agent's error: {detail}"
        if detail and said not in target.warnings:
            target.warnings.append(said)

    def busy(self) -> bool:
        return any(f.busy() for f in self.families)

    def poll(self, bpf: Any, target: Target) -> None:
        for fam in self.families:
            fam.poll(bpf, target)

    def samples(self, bpf: Any) -> int:
        sampler = self._first(CpuSampler)
        return sampler.samples(bpf) if sampler is not None else 0

    def finish(self, bpf: Any, target: Target, exited: bool) -> None:
        """Sampling ends: the sampler's events first, then the families that take their last records."""
        for fam in sorted(self.families, key=lambda f: not isinstance(f, CpuSampler)):
            fam.finish(bpf, target, exited)
        dev = self._first(DeviceActivity)
        if dev is not None and not exited and dev.flush_state(bpf).status < 0:  # a failure after its start
            try:
                maps = procfs.read_maps(target.pid)
            except procfs.ProcessGone:
                return
            self._agent_said(target, maps)

    def take_window(self, bpf: Any, target: Target, cut: int) -> None:
        for fam in self.families:
            fam.take_window(bpf, target, cut)

    def clear_window(self, bpf: Any, target: Target, stacks_free: bool) -> None:
        for fam in self.families:
            fam.clear_window(bpf, target, stacks_free)

    def stats(self, bpf: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        for fam in self.families:
            out.update(fam.stats(bpf))
        return out

    def detach(self, bpf: Any, target: Target) -> bool:
        """Every family's probes detached; False when one failed (its program is then not reused)."""
        clean = True
        for fam in self.families:
            try:
                fam.detach(bpf, target)
            except Exception:
                clean = False
                log.exception("detach failed", extra={"family": fam.name, "pid": target.pid})
        return clean

    # --- reading -------------------------------------------------------------------------------------

    def ahead_ids(self, bpf: Any, inputs: BuildInputs) -> list[int] | None:
        """The GPU probes' native stack ids stored so far that no pass resolved yet (None: nothing to resolve
        ahead, no GPU probes or DWARF-unwound GPU stacks). Read before the mappings are refreshed, so every
        stack among them was captured in a mapping the space knows."""
        gpu = self._first(GpuApi)
        if gpu is None or gpu.dwarf_stacks:
            return None
        return [sid for sid in gpu.stack_ids(bpf) if sid not in inputs.gpu_frames]

    def resolve_ahead(self, bpf: Any, target: Target, inputs: BuildInputs, ids: list[int], budget_s: float) -> None:
        """Resolves GPU stacks while the capture runs, so that its end builds the profile from frames already
        symbolized (a ResNet-50 capture stores thousands of distinct stacks). At most budget_s a pass; what is
        left waits for the next pass or the build."""
        gpu = self._first(GpuApi)
        paths = CallPathResolver(target.pid, target.space, lambda sid: gpu.user_stack(bpf, sid), inputs.symbolizer,
                                 {}, native_cache=inputs.gpu_frames)
        deadline = time.monotonic() + budget_s
        for sid in ids:
            paths.native_frames(sid, False)
            inputs.resolved_ahead += 1
            if time.monotonic() >= deadline:
                break

    def build(self, bpf: Any, target: Target, inputs: BuildInputs) -> Built:
        """What every family aggregated, as one tree: CPU samples, GPU API calls and device work under their
        call paths (Python frames and DWARF-unwound stacks where those families ran)."""
        tree = CallTree(target.info.command)
        python, unwinder = self._named("python"), self._named("native_unwind")
        gpu: GpuApi | None = self._first(GpuApi)
        dev: DeviceActivity | None = self._first(DeviceActivity)
        sampler: CpuSampler | None = self._first(CpuSampler)
        thread_names = dict(inputs.thread_names)  # /proc's, read when the capture first listed each thread
        python_names = python.thread_names(target.pid) if python is not None else None
        if python is not None:  # OS names of threads the Python walker met, gone before /proc was read
            for tid, name in python.os_thread_names(target.pid).items():
                thread_names.setdefault(tid, name)
        if gpu is not None:
            # A GPU thread's name now, if it lives; else its name at its first GPU call (gpu_comm), not the one
            # /proc gave when the thread was first listed: that may have been between its clone and its
            # pthread_setname_np, with its parent's name still
            for tid, name in gpu.thread_names(bpf, target.pid).items():
                thread_names[tid] = procfs.thread_name(target.pid, tid) or name
        native = inputs.symbolizer

        def resolver(read_stack: StackReader,
                     read_kernel: Callable[[int], list[int]] | None = None, dwarf: bool = True,
                     native_cache: dict[int, list[Frame]] | None = None) -> CallPathResolver:
            if unwinder is not None and dwarf:
                read_stack = _unwinder_reader(bpf, unwinder)
                native_cache = None
            return CallPathResolver(
                target.pid, target.space, read_stack, native, thread_names,
                read_python=(lambda sid: python.frames(bpf, target, sid)) if python is not None else None,
                python_modules=python.interpreter_modules(target.pid) if python is not None else None,
                native_python=self.opts.native_python, read_kernel_stack=read_kernel, native_cache=native_cache,
                python_names=python_names)

        stats: dict[str, int] = {}
        cpu_paths = None
        if sampler is not None:
            cpu_paths = resolver(lambda sid: sampler.user_stack(bpf, sid), lambda sid: sampler.kernel_stack(bpf, sid))
            # samples in deepctx's own probes (daemon/probe_samples.py): only where GPU calls are probed
            probes = ProbeSamples(target.pid, target.space, native, cpu_paths.read_stack) if gpu is not None else None
            for b in sampler.buckets(bpf):
                if b.pid != target.pid:
                    continue
                lost = bool(b.flags & SAMPLE_F_USER_STACK_LOST)
                path = cpu_paths.path(b.tid, b.user_stack, b.py_stack, lost, b.kernel_stack_id)
                if probes is not None and b.flags & SAMPLE_F_KERNEL_MODE and not lost and b.user_stack \
                        and probes.in_probe(b.user_stack):
                    kernel = len(cpu_paths.kernel_frames(b.kernel_stack_id)) if b.kernel_stack_id >= 0 else 0
                    path.insert(len(path) - kernel, DEEPCTX_PROBE)  # counted from the tree (label_stats)
                tree.add(path, "cpu_samples", b.count)
        stats.update(self.stats(bpf))
        mode = ""
        duration = inputs.duration_s
        gpu_paths = (resolver(lambda sid: gpu.user_stack(bpf, sid), dwarf=gpu.dwarf_stacks,
                              native_cache=inputs.gpu_frames) if gpu is not None else None)
        # the device buckets carry the GPU probes' stack ids: merged where they resolve alike as they are read
        view = (DeviceView.read(dev, bpf, target.pid, gpu_paths.stack_key if gpu_paths is not None else None)
                if dev is not None else None)
        scales = None
        if inputs.gpu_probed_s is not None:  # probes attached part of the window: scaled up to it
            shares = inputs.device_shares
            scales = duty_scales(duration, inputs.gpu_probed_s, shares.recorded_s if shares else 0.0, inputs.gpu_busy,
                                 shares.records if shares is not None and dev is not None else None)
            stats.update(scales.stats())
        if view is not None and scales is not None and dev is not None and dev.can_pause:
            view = view.scaled(scales.device)
        trace: list[dict[str, Any]] = []
        if gpu is not None and gpu_paths is not None:
            mode = gpu.mode
            handle_names = {**(view.kernel_names() if view else {}), **gpu.function_names(bpf)}
            namer = KernelNamer(target.pid, target.space, native, handle_names, gpu.handle_strings(bpf),
                                agent_named=view is not None and bool(view.buckets))
            libs = library_basenames(target.space)
            buckets = [b for b in gpu.buckets(bpf) if b.pid == target.pid]
            if inputs.gpu_probed_s is not None:  # probes attached part of the window: counts scaled up to it
                stats["gpu_probe_duty_permille"] = round(1000 * min(1.0, inputs.gpu_probed_s / max(duration, 1e-9)))
                if inputs.device_shares is not None and inputs.device_shares.shares:
                    stats.update(inputs.device_shares.stats())
                buckets = scale_buckets(buckets, scales.calls if scales is not None else 1.0)
            origins = Origins([h.label for h in gpu.handoffs], gpu.node_types(bpf, target.pid))
            stats.update(add_gpu_buckets(tree, buckets, gpu_paths, namer, lambda api: libs.get(api.library), origins))
            if view is not None:
                stats.update(view.add_to(tree, gpu_paths, namer, lambda api: libs.get(api.library), origins))
                bandwidth = memory_bandwidth(target.pid) if view.buckets else None
                if bandwidth:  # the device part's memory_bandwidth_gb_s (profiles/document.py)
                    stats["device_memory_bandwidth_mb_s"] = bandwidth // 1_000_000
            if dev is not None and dev.trace:
                trace = build_trace(dev.events, view.names if view else {}, inputs.clock_offset_ns, target.pid)
            stats["gpu_stacks_truncated"] = gpu_paths.truncated_stacks
            stats["gpu_stacks_resolved_ahead"] = inputs.resolved_ahead
        if cpu_paths is not None:
            stats["cpu_stacks_truncated"] = cpu_paths.truncated_stacks
        stats["native_stacks_unwind_lost"] = native.stacks_cut
        if python is not None:  # counted again: the GPU call paths above named more stacks
            stats["python_unknown_frames"] = python.unknown_frames()
        stats["cpu_samples_in_profile"] = tree.total("cpu_samples")
        warnings = scales.warnings if scales is not None else []
        compiles: list[Compile] = []
        sources = python.compiled_sources(target.pid) if python is not None else None
        if sources is not None:  # kernels of torch.compile'd code back to the model's lines
            compiled = annotate_compiled(tree, sources)
            stats.update(compiled)
            compiles = sources.compiles()
            warnings = [*warnings, *compiled_warnings(compiled, bool(sources.trace_reads))]
        return Built(tree, stats, warnings, mode, trace, compiles=compiles)

    def _named(self, name: str) -> Any:
        return next((f for f in self.families if f.name == name), None)


def _unwinder_reader(bpf: Any, unwinder: Any) -> StackReader:
    """The DWARF-unwound stacks' reader: where a walk stopped short of the thread's entry, the marker that says
    why ([truncated] only at the depth limit; daemon/unwind_stops.py); none for an id the map does not hold."""
    def read(stack_id: int) -> tuple[list[int], bool | Frame]:
        ips, flags = unwinder.stack(bpf, stack_id)
        return ips, (stop_marker(flags) or False) if ips else False

    return read
