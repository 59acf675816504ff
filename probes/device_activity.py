"""Loader for device_activity.bpf.c: the CUPTI agent's USDT probes, joined in BPF with the GPU API
probes' call paths (probe family "device"; compose it after the "gpu" family)."""

from __future__ import annotations

import ctypes as ct
import logging
import os
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from deepctx.host.gpu_agents import find_agent
from deepctx.host.gpu_runtimes import INJECTION_VARS
from deepctx.host.process_handle import ProcessHandle
from deepctx.host.procfs import (
    Mapping,
    ProcessGone,
    ProcessMemory,
    environ_value,
    open_mapped_file,
    read_maps,
)
from deepctx.probes import usdt
from deepctx.probes.family import FamilyDefaults, Target, read_source
from deepctx.probes.gpu_api import GPU_NO_CONTINUE, GpuCorrKey, GpuKey
from deepctx.probes.maps import CountsMap, RingSink, items, percpu_sum, ring_sink
from deepctx.probes.pc_sampling import OldAgent, PcSampling, PcsOptions, config_address, hand_options

log = logging.getLogger("deepctx.device")

PCS_FINISH_TIMEOUT_S = 30.0  # the capture's end waits this long for a PC-sampling agent's last flush
PROVIDER = "deepctx"

# Mirrors of device_activity.h (tests/integration/device/test_device_layouts.py checks them against the header).
DEV_KIND_KERNEL, DEV_KIND_MEMCPY, DEV_KIND_MEMSET, DEV_KIND_SYNC = 1, 2, 3, 4
DEV_BATCH = 64
DEV_REC_F_GRAPH, DEV_REC_F_SAMPLED = 1 << 0, 1 << 1
DEV_API_DOMAIN_SHIFT = 16
DEV_KEY_F_UNKNOWN, DEV_KEY_F_UNPROBED, DEV_KEY_F_GRAPH, DEV_KEY_F_SAMPLED = 1 << 0, 1 << 1, 1 << 2, 1 << 3
DEV_NAME_LEN = 512
DEV_EV_API, DEV_EV_RECORD = 1, 2
DEV_API_UNPROBED = 0xFFFF
DEV_AGENT_OK, DEV_AGENT_ACTIVE, DEV_AGENT_IDLE = 0, 1, 2
DEV_AGENT_E_NO_CUDA, DEV_AGENT_E_NO_CUPTI, DEV_AGENT_E_BUSY, DEV_AGENT_E_CUPTI, DEV_AGENT_E_PENDING = -1, -2, -3, -4, -5
(DEV_STAT_CORRELATIONS, DEV_STAT_UNPROBED, DEV_STAT_CORR_FULL, DEV_STAT_BATCHES, DEV_STAT_RECORDS, DEV_STAT_UNKNOWN,
 DEV_STAT_BEFORE, DEV_STAT_MAP_FULL, DEV_STAT_NAMES, DEV_STAT_TRACE_LOST, DEV_STAT_BATCH_CUT, DEV_STAT_TIME_NS,
 DEV_STAT_SAMPLED, DEV_STAT_GRAPH_NODES, DEV_STAT_GRAPH_NODES_UNKNOWN, DEV_STAT_GRAPH_PLACED, DEV_STAT_GRAPH_UNPLACED,
 DEV_STAT__COUNT) = range(18)
DEV_GRAPH_MADE_LABEL = 0xFFFE
STAT_NAMES = {
    DEV_STAT_CORRELATIONS: "device_correlations",
    DEV_STAT_UNPROBED: "device_correlations_outside_probed_calls",
    DEV_STAT_CORR_FULL: "device_correlations_dropped",
    DEV_STAT_BATCHES: "device_batches",
    DEV_STAT_RECORDS: "device_records",
    DEV_STAT_UNKNOWN: "device_records_unknown_correlation",
    DEV_STAT_BEFORE: "device_records_before_capture",
    DEV_STAT_MAP_FULL: "device_records_dropped_map_full",
    DEV_STAT_NAMES: "device_kernel_names",
    DEV_STAT_TRACE_LOST: "device_trace_events_lost",
    DEV_STAT_BATCH_CUT: "device_batches_cut",
    DEV_STAT_TIME_NS: "device_time_ns",
    DEV_STAT_SAMPLED: "device_records_charged_to_a_sampled_call",
    DEV_STAT_GRAPH_NODES: "device_graph_nodes",
    DEV_STAT_GRAPH_NODES_UNKNOWN: "device_graph_nodes_made_in_unknown_calls",
    DEV_STAT_GRAPH_PLACED: "device_graph_records_under_their_node",
    DEV_STAT_GRAPH_UNPLACED: "device_graph_records_without_node_path",
}
AGENT_STATES = {
    DEV_AGENT_ACTIVE: "active", DEV_AGENT_IDLE: "idle",
    DEV_AGENT_E_NO_CUDA: "the process has no CUDA context yet",
    DEV_AGENT_E_NO_CUPTI: "CUPTI (libcupti) could not be loaded in the process",
    DEV_AGENT_E_BUSY: "CUPTI is held by another profiler in the process (one subscriber at a time)",
    DEV_AGENT_E_CUPTI: "a CUPTI call failed in the process",
    DEV_AGENT_E_PENDING: "the agent is still starting",
}
# CUPTI's CUpti_ActivityMemcpyKind
COPY_KINDS = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
              9: "HtoH", 10: "PtoP"}


class DevRecord(ct.Structure):
    _fields_ = [("start_ns", ct.c_uint64), ("end_ns", ct.c_uint64), ("bytes", ct.c_uint64), ("name", ct.c_uint64),
                ("graph_node", ct.c_uint64), ("correlation", ct.c_uint32), ("stream", ct.c_uint32),
                ("device", ct.c_uint32), ("kind", ct.c_uint8), ("copy_kind", ct.c_uint8), ("flags", ct.c_uint16),
                ("sample", ct.c_uint32), ("grid", ct.c_uint32 * 3), ("block", ct.c_uint32 * 3),
                ("shared_mem", ct.c_uint32), ("api_ns", ct.c_uint32), ("pad", ct.c_uint32)]


class DevCorr(ct.Structure):
    _fields_ = [("call", GpuKey), ("api_start_ns", ct.c_uint64), ("fn_name", ct.c_uint64), ("api", ct.c_uint32),
                ("joined", ct.c_uint32)]


class DevCorrSlot(ct.Structure):
    _fields_ = [("key", GpuCorrKey), ("corr", DevCorr)]


class DevGraphKey(ct.Structure):
    """struct dev_graph_key: a CUDA graph node of a process (dev_graph_nodes)."""

    _fields_ = [("pid", ct.c_uint32), ("pad", ct.c_uint32), ("node", ct.c_uint64)]


class DevKey(ct.Structure):
    _fields_ = [("call", GpuKey), ("name", ct.c_uint64), ("fn_name", ct.c_uint64), ("device", ct.c_uint32),
                ("kind", ct.c_uint8), ("copy_kind", ct.c_uint8), ("flags", ct.c_uint16)]


class DevVal(ct.Structure):
    _fields_ = [("count", ct.c_uint64), ("time_ns", ct.c_uint64), ("bytes", ct.c_uint64), ("api_time_ns", ct.c_uint64)]


# DevKey and DevVal as struct formats, field by field: one unpack per entry instead of an attribute read per
# field (ctypes builds an object for every nested struct and array it hands out)
DEV_KEY_FORMAT = struct.Struct("<IIQQQQ3I3IIHBBQQIHHQ" "QQIBBH")  # GpuKey, then the record's fields
DEV_VAL_FORMAT = struct.Struct("<4Q")


def bucket_of(key: bytes, val: Sequence[int]) -> DeviceBucket:
    """A counts map entry as a bucket: its key's bytes and its value's fields (DEV_VAL_FORMAT.unpack)."""
    (pid, tid, user_stack, py_stack, obj, stream, g0, g1, g2, b0, b1, b2, shared_mem, api_id, api_kind, call_flags,
     origin_user_stack, origin_py_stack, origin_tid, origin_label, _pad, origin_node,
     name, fn_name, device, kind, copy_kind, flags) = DEV_KEY_FORMAT.unpack(key)
    count, time_ns, nbytes, api_time_ns = val
    return DeviceBucket(pid, tid, user_stack, py_stack, api_id, obj, stream, (g0, g1, g2), (b0, b1, b2), shared_mem,
                        api_kind, call_flags, name, fn_name, device, kind, copy_kind, flags, count, time_ns, nbytes,
                        origin_tid, origin_user_stack, origin_py_stack, origin_label, origin_node, api_time_ns)


class DevNameKey(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("pad", ct.c_uint32), ("addr", ct.c_uint64)]


class DevEvent(ct.Structure):
    _fields_ = [("start_ns", ct.c_uint64), ("end_ns", ct.c_uint64), ("bytes", ct.c_uint64), ("name", ct.c_uint64),
                ("graph_node", ct.c_uint64), ("user_stack", ct.c_uint64), ("py_stack", ct.c_uint64),
                ("stream_handle", ct.c_uint64), ("pid", ct.c_uint32), ("tid", ct.c_uint32),
                ("correlation", ct.c_uint32), ("stream", ct.c_uint32), ("device", ct.c_uint32),
                ("api_id", ct.c_uint16), ("type", ct.c_uint8), ("kind", ct.c_uint8), ("copy_kind", ct.c_uint8),
                ("known", ct.c_uint8), ("pad", ct.c_uint16)]


class DevFlush(ct.Structure):
    _fields_ = [("sequence", ct.c_uint64), ("started_ns", ct.c_uint64), ("dropped", ct.c_uint64),
                ("flushes", ct.c_uint64), ("status", ct.c_int64), ("active_ns", ct.c_uint64),
                ("idle_ns", ct.c_uint64), ("unfinished", ct.c_uint64)]


class DevSpan(ct.Structure):
    _fields_ = [("first_start_ns", ct.c_uint64), ("last_end_ns", ct.c_uint64), ("records", ct.c_uint64),
                ("device_ns", ct.c_uint64), ("stale", ct.c_uint64), ("stale_ns", ct.c_uint64)]


class DevConfig(ct.Structure):
    _fields_ = [("start_ns", ct.c_uint64), ("trace", ct.c_uint32), ("agent_calls", ct.c_uint32),
                ("spans", ct.c_uint32), ("cont_slot", ct.c_uint32), ("share_from_ns", ct.c_uint64)]


@dataclass(slots=True)  # one per map entry: not frozen (a frozen init sets every field via object.__setattr__)
class DeviceBucket:
    """GPU work of one kind under one call path (`call`: the GPU API key; GpuKey fields)."""

    pid: int
    tid: int
    user_stack: int
    py_stack: int
    api_id: int  # gpu_apis index, DEV_API_UNPROBED when the API probes did not see the call
    obj: int
    stream: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    api_kind: int  # the API's copy direction argument (gpu_key.kind)
    call_flags: int  # GPU_KEY_F_*
    name: int  # kernel name id (address of CUPTI's string in the target)
    fn_name: int  # API name string (unprobed calls)
    device: int
    kind: int  # DEV_KIND_*
    copy_kind: int  # CUPTI copy kind / sync type
    flags: int  # DEV_KEY_F_*
    count: int
    time_ns: int
    bytes: int
    origin_tid: int = 0  # launched by a worker while this thread's hand-off call ran (see gpu_api.h)
    origin_user_stack: int = 0
    origin_py_stack: int = 0
    origin_label: int = 0  # index of the hand-off point (GpuApi.handoffs)
    origin_node: int = 0  # the backward node's type when charged to the node's creator
    api_time_ns: int = 0  # CPU time of the calls the agent alone reported (exact captures; dev_record.api_ns)


@dataclass(slots=True)  # one per map entry: not frozen (a frozen init sets every field via object.__setattr__)
class TraceEvent:
    """One trace-mode event as BPF emitted it (struct dev_event)."""

    type: int
    start_ns: int
    end_ns: int
    bytes: int
    name: int
    graph_node: int
    user_stack: int
    py_stack: int
    stream_handle: int
    pid: int
    tid: int
    correlation: int
    stream: int
    device: int
    api_id: int
    kind: int
    copy_kind: int
    known: bool


@dataclass
class _AgentFile:
    path: str  # a path the daemon can open
    probes: list[usdt.UsdtProbe]
    request: list[usdt.UsdtProbe] = field(default_factory=list)  # flush_request sites
    stop: list[usdt.UsdtProbe] = field(default_factory=list)  # stop_request sites (none in agents before it)


# In attach order: the agent starts reporting when the batch probe is attached (agent_watched()), so it is
# last, and the start finds every other probe there (the start's status, every launch's correlation).
WALK_FN = "on_dev_correlation_walk"  # the correlation handler's continued paths (dev_walk: a tail call)
HANDLERS = {"status": "on_dev_status", "flushed": "on_dev_flushed", "api_exit": "on_dev_api_exit",
            "correlation": "on_dev_correlation", "graph_node": "on_dev_graph_node", "batch": "on_dev_batch"}


class AgentUnusable(ValueError):
    """The process has a deepctx agent whose probes this daemon cannot read (another version?)."""


def is_agent(path: str) -> bool:
    """The CUPTI agent or the rocprofiler-sdk agent (native/): the same probes, the same records."""
    name = os.path.basename(path.removesuffix(" (deleted)")).removeprefix("memfd:")  # injected: from a memfd
    return name.startswith(("libdeepctx_cupti", "libdeepctx_rocprof"))


def agent_mappings(mappings: list[Mapping]) -> list[Mapping]:
    return [m for m in mappings if m.file_backed and m.executable and is_agent(m.path)]




def expected_agent(environ: Callable[[str], str | None]) -> str | None:
    """The agent a process will load when it starts its GPU runtime, from its environment (read through
    `environ`): a process picked up before cuInit has the CUDA libraries mapped but no agent yet."""
    for name in INJECTION_VARS:  # `deepctx run` sets them; so may a user or a launcher
        for path in (environ(name) or "").split(":"):
            if path and is_agent(path):
                return path
    return None


class Injector(Protocol):
    """What loads the agent into a running process: the daemon's (daemon/inject/agent.py), handed in, so
    that this layer never imports the daemon."""

    def check_injectable(self, pid: int) -> None: ...

    def inject_agent(self, handle: ProcessHandle, agent: str, *, before_load: Callable[[str], None],
                     after_load: Callable[[str], None]) -> Any: ...


class DeviceActivity(FamilyDefaults):
    """Probe family "device". `inject`: load the agent into the target at attach (ptrace-driven dlopen)
    when it is not there yet; otherwise the family works with an agent the target already has
    (`deepctx run`, or CUDA_INJECTION64_PATH set by the user) and refuses without one when `required`.
    `pc_options`: the request's PC sampling (`deepctx attach --pc-sampling`), handed to every agent the family
    attaches to; None: PC sampling as the target's environment says (`deepctx run --pc-sampling`)."""

    name = "device"

    def __init__(self, trace: bool = False, inject: bool = False, required: bool = False,
                 agent_path: str | None = None, count_entries: int = 65536, corr_entries: int = 262144,
                 corr_ids: int = 1 << 21,
                 name_entries: int = 16384, ringbuf_pages: int = 4096,
                 injector: Injector | None = None, sampling: bool = False, windows: bool = False,
                 flush_timeout_s: float = 1.0, pc_options: PcsOptions | None = None) -> None:
        self.trace = trace
        self.pc_options = pc_options
        self.flush_timeout_s = flush_timeout_s  # how long the capture's end waits for the agent's last records
        # The agent announces a sample of the calls (each thread's first after every DEEPCTX_SAMPLE_US),
        # and every record carries the announced call that stands for its own: one trap per sample, not
        # per call. Trace mode needs every call.
        self.sampling = sampling and not trace
        self.agent_calls = False  # the GPU API probes left launches to the agent (GpuApi.agent_reports_calls)
        self.spans = False  # a duty cycle measures each attached share: records widen dev_span (take_span)
        self.share_from_ns = 0  # when the current share began (CLOCK_MONOTONIC): earlier work's records are stale
        self.paused = False  # duty cycle: probes detached, the agent idle
        self.resumes = 0
        self.inject = inject
        self.required = required or inject
        self.agent_path = agent_path
        self.count_entries = count_entries
        self.counts = CountsMap("dev_counts", windows)  # windows: continuous mode cuts them
        for name, n in (("corr_entries", corr_entries), ("corr_ids", corr_ids)):
            if n <= 0 or n & (n - 1):
                raise ValueError(f"{name} must be a power of two (its ring is indexed by masking), not {n}")
        self.corr_entries = corr_entries
        self.corr_ids = corr_ids
        self.name_entries = name_entries
        self.ringbuf_pages = ringbuf_pages
        self.injector = injector
        self.events: list[TraceEvent] = []
        self.injected = False
        self.start_ns = 0
        self._files: dict[tuple[str, int], _AgentFile] = {}
        self._sites: set[int] = set()
        self._mapped: set[tuple[int, str, int]] = set()
        self._attacher: usdt.UsdtAttacher | None = None
        self._ringbuf_open = False
        self._pid = 0
        self.agent_kind = ""  # "cupti" | "rocprof": the target's agent (prepare)
        # The agent the process's environment names and that it has not loaded yet (prepare): the probes
        # attach when it appears (poll), as for an agent loaded by dlopen.
        self.expected_agent: str | None = None
        self._sealed: Any = None  # the injected agent's sealed memfd (inject.memfd.SealedAgent) while attached
        self.pcs: PcSampling | None = None  # PC sampling, when the target's environment asks (prepare)
        # The program has on_dev_correlation_walk (the GPU API family's .eh_frame continuation is compiled in), and
        # the process's slot in gpu_ranges that its walks are continued with (ProbeSet sets both; None: none)
        self.continued = False
        self.cont_slot: int | None = None

    # --- ProbeFamily ------------------------------------------------------------------------------

    def source(self) -> str:
        return read_source("device_activity.bpf.c") + (self.pcs.source() if self.pcs else "")

    def defines(self) -> dict[str, int | str]:
        return {"DEV_CORR_ENTRIES": self.corr_entries, "DEV_CORR_IDS": self.corr_ids,
                "DEV_COUNT_ENTRIES": self.count_entries,
                "DEV_COUNT_SPARE": self.counts.spare_entries(self.count_entries),
                "DEV_COUNT_FLAGS": self.counts.flags(),
                "DEV_NAME_ENTRIES": self.name_entries, "DEV_SITE_ENTRIES": 256,
                "DEV_RINGBUF_PAGES": self.ringbuf_pages,
                "GPU_LAST_CALL": 1,  # gpu_api.bpf.c keeps each thread's last entry-only call for the join
                **(self.pcs.defines() if self.pcs else {})}

    def load(self, bpf: Any) -> None:
        from deepctx.probes.uprobes import load_for_uprobes

        load_for_uprobes(bpf, sorted({*HANDLERS.values(), "on_dev_request", *([WALK_FN] if self.continued else [])}))

    @staticmethod
    def kind_of(path: str) -> str:
        return "rocprof" if os.path.basename(path).startswith("libdeepctx_rocprof") else "cupti"

    def prepare(self, target: Target) -> None:
        # --- PC sampling (probes/pc_sampling.py): asked for by the request (attach), else by the environment
        # (`deepctx run --pc-sampling`)
        options = self.pc_options or PcsOptions.from_environment(lambda name: environ_value(target.pid, name))
        self.pcs = PcSampling(options) if options is not None else None
        if self.pcs is not None:
            self.pcs.warnings = target.warnings  # said at the build, where the samples meet the kernels
        mapped = agent_mappings(target.space.mappings)
        if mapped:
            self.agent_kind = self.kind_of(mapped[0].path)
            try:  # an agent of another version can have probes this daemon does not read: say so now
                path = open_mapped_file(target.pid, mapped[0])
                usdt.read_probes(path, PROVIDER)
                if self.pc_options is not None and config_address(path, self._mappings_of(target, mapped[0])) is None:
                    raise OldAgent("it was built before `attach --pc-sampling` (it takes no options): start the "
                                   "program with `deepctx run --pc-sampling`")
            except (OSError, usdt.UsdtError, OldAgent) as e:
                raise AgentUnusable(f"the deepctx agent in the process ({mapped[0].path}) cannot be used: {e}") from e
            return
        # Not loaded yet, but the environment names it: the process loads it when it starts its GPU
        # runtime, and the probes attach then (poll), even when an injection was asked for.
        self.expected_agent = expected_agent(lambda name: environ_value(target.pid, name))
        if self.expected_agent:
            self.agent_kind = self.kind_of(self.expected_agent)
            return
        self.agent_kind = "cupti"  # attach loads the CUPTI agent (rocprofiler-sdk cannot start late)
        if self.inject:
            if self.injector is None:
                raise ValueError("loading the agent needs an injector (the daemon's)")
            self.agent_path = self.agent_path or find_agent()
            self.injector.check_injectable(target.pid)  # ValueError with the reason: no CUDA, ptrace not permitted
            return
        if self.required:
            raise ValueError("the process has no deepctx CUPTI agent (start it with `deepctx run`, or attach "
                             "with --gpu-activity to load one)")
        raise ValueError("no deepctx CUPTI agent in the process")

    def attach(self, bpf: Any, target: Target) -> None:
        self.counts.bind(bpf)
        self._pid = target.pid
        self._attacher = usdt.UsdtAttacher(bpf)
        self.start_ns = time.monotonic_ns()  # CLOCK_MONOTONIC: bpf_ktime_get_ns()'s clock
        self.write_config(bpf)
        if self.pcs is not None:
            self.pcs.open(bpf, target.pid)
        if self.trace:
            ring_sink(bpf, "dev_events").fn = self._on_event
            self._ringbuf_open = True
        self._attach_new(bpf, target)
        if not self._files and self.inject and not self.expected_agent:
            self._inject(bpf, target)
        elif self._files:
            self._wait_active(bpf)

    def write_config(self, bpf: Any) -> None:
        slot = GPU_NO_CONTINUE if self.cont_slot is None else self.cont_slot
        bpf[b"dev_config"][ct.c_int(0)] = DevConfig(self.start_ns, int(self.trace), int(self.agent_calls),
                                                   int(self.spans), slot, self.share_from_ns)

    def _link_walk(self) -> None:
        """on_dev_correlation goes on in on_dev_correlation_walk (a tail call) for the paths it continues: loaded
        as the correlation handler was (a tail call's target must be of its caller's kind)."""
        if not self.continued or self._attacher is None:
            return
        from bcc import BPF

        from deepctx.probes.uprobes import BPF_TRACE_UPROBE_MULTI

        bpf: Any = self._attacher.bpf
        fn = bpf.load_func(WALK_FN.encode(), BPF.KPROBE,
                           attach_type=BPF_TRACE_UPROBE_MULTI if self._attacher.multi else -1)
        bpf[b"dev_walk"][ct.c_int(0)] = ct.c_int(fn.fd)

    def _wait_active(self, bpf: Any, timeout_s: float = 1.0) -> None:
        """An agent that was idle starts within its watcher's tick (100 ms) of the semaphores rising:
        wait for its status probe, so that the capture covers the first call after attach."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.flush_state(bpf).status != 0:  # active, or a failure it reported
                return
            time.sleep(0.005)  # the agent's thread reports through its status probe, with a deadline

    def poll(self, bpf: Any, target: Target) -> None:
        self._attach_new(bpf, target)
        self.drain(bpf)

    def detach(self, bpf: Any, target: Target) -> None:
        if self._attacher is not None:
            self._attacher.close()  # semaphores drop: the agent goes idle and lets CUPTI go
        if self._sealed is not None:  # no attach through its path after this: the family is done
            self._sealed.close()
            self._sealed = None
        table = bpf[b"dev_sites"]
        for addr in self._sites:
            try:
                del table[usdt.UsdtSiteKey(target.pid, 0, addr)]
            except KeyError:
                pass
        self._sites.clear()
        if self._ringbuf_open:
            self.drain(bpf)
            ring_sink(bpf, "dev_events").fn = RingSink.drop  # the program serves other captures next
            self._ringbuf_open = False
        if self.pcs is not None:  # PC sampling (probes/pc_sampling.py): its last messages, then its ring let go
            self.drain(bpf)
            self.pcs.close(bpf)

    def take_window(self, bpf: Any, target: Target, cut: int) -> None:
        """Continuous mode, at a window's cut: its device time leaves the map (correlations in flight stay;
        records handed over while the window is built count in the next one)."""
        self.counts.take(bpf, target.pid, cut)

    def clear_window(self, bpf: Any, target: Target, stacks_free: bool) -> None:
        self.counts.release()

    def stats(self, bpf: Any) -> dict[str, int]:
        table = bpf[b"dev_stats"]
        out = {STAT_NAMES[i]: percpu_sum(table, i) for i in range(DEV_STAT__COUNT)}
        f = self.flush_state(bpf)
        out["device_agent_flushes"] = f.flushes
        out["device_records_dropped_by_cupti"] = f.dropped
        out["device_records_unfinished_at_stop"] = f.unfinished
        out["device_agent_status"] = f.status
        out["device_agent_injected"] = int(self.injected)
        out["device_usdt_sites"] = self._attacher.sites if self._attacher else 0
        out["device_probes_attached"] = int(self._attacher is not None and not self.paused)
        out["device_agent_awaited"] = int(bool(self.expected_agent) and not self._files)
        out["device_probe_resumes"] = self.resumes
        if self.pcs is not None:
            out.update(self.pcs.stats(bpf))
        return out

    # --- attaching ----------------------------------------------------------------------------------

    def _agent_file(self, pid: int, m: Mapping) -> _AgentFile | None:
        """The agent file of mapping m; a new one without its handlers (_attach_new attaches them)."""
        af = self._files.get(m.file_key)
        if af is not None:
            return af
        try:
            path = open_mapped_file(pid, m)
            probes = usdt.read_probes(path, PROVIDER)
        except (OSError, usdt.UsdtError) as e:
            log.warning("cannot read the CUPTI agent's probes", extra={"path": m.path, "error": str(e)})
            return None
        return self._attach_file(path, probes, m.file_key, attach=False)

    def _attach_file(self, path: str, probes: list[usdt.UsdtProbe], key: tuple[str, int],
                     attach: bool = True) -> _AgentFile:
        assert self._attacher is not None
        af = _AgentFile(path, probes)
        af.request = [p for p in probes if p.name == "flush_request"]
        af.stop = [p for p in probes if p.name == "stop_request"]
        self._files[key] = af
        if attach and not self.paused:
            self._attach_handlers(af)
        return af

    def _attach_handlers(self, af: _AgentFile) -> None:
        """The probes a capture watches (their semaphores rise: the agent starts reporting)."""
        assert self._attacher is not None
        if self.pcs is not None:  # before the batch probe: the agent decides at its start
            self.pcs.attach(self._attacher, af.path, self._pid, af.probes)
        if self.sampling:  # first, so that the agent's first announcement already samples
            self._attacher.attach("on_dev_request", af.path, self._pid, [p for p in af.probes if p.name == "sampling"])
        for probe_name, fn in HANDLERS.items():
            if probe_name == "api_exit" and not self.trace:
                continue  # its semaphore stays down: the agent does not even fire it
            sites = [p for p in af.probes if p.name == probe_name]
            self._attacher.attach(fn, af.path, self._pid, sites)
        self._link_walk()
        log.info("CUPTI agent probes attached", extra={"path": af.path, "sites": len(af.probes), "pid": self._pid})

    # --- duty cycle (continuous mode) -----------------------------------------------------------------

    @property
    def can_pause(self) -> bool:
        """The probes can be detached and attached again (uprobe_multi links; not in trace mode)."""
        return self._attacher is not None and self._attacher.multi is True and not self.trace

    def pause(self, bpf: Any, target: Target) -> None:
        """Stops the agent, which hands over every record and lets CUPTI go, then detaches, so the target
        pays nothing until resume."""
        if self.paused or self.trace or self._attacher is None:
            return
        if self._files:  # attached: hand over, then detach (probes attached one by one cannot be)
            if not self.can_pause:
                return
            self.stop(bpf, target)
            self._attacher.close()  # the request's links with the others: their closes wait together
        self.paused = True  # an agent that appears now is attached at resume

    def resume(self, bpf: Any, target: Target) -> None:
        if not self.paused:
            return
        self.paused = False
        if self.spans:  # records of work that started before this share are an earlier share's, come late
            self.share_from_ns = time.monotonic_ns()
            self.write_config(bpf)
        for af in self._files.values():
            self._attach_handlers(af)
        self.resumes += 1

    def _attach_new(self, bpf: Any, target: Target) -> None:
        for m in agent_mappings(target.space.mappings):
            ident = (m.start, m.dev, m.inode)
            if ident in self._mapped:
                continue
            new = m.file_key not in self._files
            af = self._agent_file(target.pid, m)
            if af is None:
                continue
            self._mapped.add(ident)
            same = self._mappings_of(target, m)
            self._register_sites(bpf, target.pid, af, same)
            # then the handlers: the agent starts (and says so) as soon as they are, and a probe whose site
            # is not registered yet is dropped (the start's status probe was, every time); it reads the PC
            # options at its start, so they come first
            if new and not self.paused:
                self._hand_pc_options(target, af.path, same)
                self._attach_handlers(af)

    @staticmethod
    def _mappings_of(target: Target, m: Mapping) -> list[Mapping]:
        """The target's mappings of m's file (by inode: the name is the target's choice)."""
        return [mm for mm in target.space.mappings if mm.inode == m.inode and mm.dev == m.dev]

    def _hand_pc_options(self, target: Target, path: str, mappings: list[Mapping]) -> None:
        """The request's PC options into the agent (hand_options), before its probes rise. One that cannot
        take them samples nothing, and the profile says why."""
        if self.pc_options is None or self.pcs is None:
            return
        handle = getattr(target, "handle", None)
        try:
            hand_options(target.pid, path, mappings, self.pc_options, handle.ensure if handle is not None else None)
        except (OldAgent, ProcessGone, MemoryError, OSError) as e:
            log.warning("PC options not handed to the agent", extra={"pid": target.pid, "error": str(e)})
            target.warnings.append(f"no PC samples: the options could not be handed to the CUPTI agent ({e})")

    def _register_sites(self, bpf: Any, pid: int, af: _AgentFile, mappings: list[Mapping]) -> None:
        """Where each probe site is in this process: the handlers decode their arguments by address."""
        table = bpf[b"dev_sites"]
        for p in af.probes:
            for m in mappings:
                if m.offset <= p.pc_offset < m.offset + (m.end - m.start):
                    addr = m.start + p.pc_offset - m.offset
                    table[usdt.UsdtSiteKey(pid, 0, addr)] = usdt.site_spec(p)
                    self._sites.add(addr)

    def _inject(self, bpf: Any, target: Target) -> None:
        """Loads the agent: its probes are attached to the file first (for this pid), so the kernel
        raises the semaphores as the agent is mapped and the agent starts watched. The file is the
        daemon's own sealed memfd (inject/memfd.py), attached through its descriptor's path: it stays
        open while the family may attach again (duty-cycle resume) and is closed at detach."""
        assert self.agent_path is not None and self.injector is not None
        injector = self.injector
        handle = getattr(target, "handle", None)
        own = handle is None  # a target without a handle: bind the process now, for the injection
        keys: list[tuple[str, int]] = []

        def loaded(host_path: str) -> None:
            maps = read_maps(target.pid)
            target.space = type(target.space)(maps)
            st = os.stat(host_path)
            key = (_dev_string(st.st_dev), st.st_ino)
            ms = [m for m in maps if m.file_key == key]  # by inode: the name is the target's choice
            self._register_sites(bpf, target.pid, self._files[key], ms)
            self._mapped.update((m.start, m.dev, m.inode) for m in ms if m.executable)
            self._hand_pc_options(target, host_path, ms)  # before deepctx_agent_attach() starts it

        def before(host_path: str) -> None:
            st = os.stat(host_path)
            keys.append((_dev_string(st.st_dev), st.st_ino))
            self._attach_file(host_path, usdt.read_probes(host_path, PROVIDER), keys[-1])

        try:
            if own:
                handle = ProcessHandle.open(target.pid)
            self._sealed = injector.inject_agent(handle, self.agent_path, before_load=before, after_load=loaded)
        except BaseException:
            for key in keys:  # its path names a closed descriptor: never attach through it again
                self._files.pop(key, None)
            raise
        finally:
            if own and handle is not None:
                handle.close()
        self.injected = True

    # --- the window's end ------------------------------------------------------------------------------

    def flush_state(self, bpf: Any) -> DevFlush:
        return bpf[b"dev_flush"][ct.c_int(0)]

    def correlations(self, bpf: Any) -> int:
        """Launches the agent announced so far in the capture (its correlation probe: every launch in exact
        mode, a sample of them in sampled mode)."""
        return percpu_sum(bpf[b"dev_stats"], DEV_STAT_CORRELATIONS)

    def take_span(self, bpf: Any) -> DevSpan:
        """The span of the device work recorded since the last take (all CPUs), and starts a new one."""
        table = bpf[b"dev_span"]
        out = DevSpan()
        for cpu in table[ct.c_int(0)]:
            s = DevSpan.from_buffer_copy(bytes(cpu))
            if s.records:
                if not out.first_start_ns or s.first_start_ns < out.first_start_ns:
                    out.first_start_ns = s.first_start_ns
                out.last_end_ns = max(out.last_end_ns, s.last_end_ns)
                out.records += s.records
                out.device_ns += s.device_ns
            out.stale += s.stale
            out.stale_ns += s.stale_ns
        table.clear()  # a per-CPU array's clear() zeroes every CPU's entry
        return out

    def flush(self, bpf: Any, target: Target, timeout_s: float = 1.0, keep_request: bool = False) -> bool:
        """Asks the agent to hand over every completed record now and waits until it has (at most
        timeout_s): raises the flush_request semaphore by attaching to its site, waits for a flushed
        probe that began after the request, then lowers it (keep_request: the caller closes every link
        next, this one included). False when the agent did not answer."""
        return self._request(bpf, target, lambda af: af.request, lambda f, t0: f.started_ns >= t0, timeout_s, keep_request)

    def finish(self, bpf: Any, target: Target, exited: bool) -> None:
        """The capture's sampling ended: the agent hands over its last records (an exiting one flushed at
        exit)."""
        if exited:
            return
        if not self.stop(bpf, target, self.finish_timeout_s()):
            target.warnings.append("the CUPTI agent did not hand over its last records in time: device "
                                   "activity at the end of the window may be missing")

    def finish_timeout_s(self) -> float:
        """How long the capture's end waits for the agent's last records. With PC sampling the agent's stop
        flush first drains CUPTI's PC sampling (cuptiPCSamplingGetData until nothing remains, then
        cuptiPCSamplingDisable, which parses what the hardware buffer still holds) and sends its records,
        then flushes the activity buffers: a run shorter than the flush period hands over every sample in
        that flush, and at short periods (--pc-period 8: 2^8 cycles, some hundred million samples a second
        on an H200) CUPTI's parsing alone outlasts the 1 s that the activity flush needs, so the window
        ended without its samples (0 in test_cost_per_period). The agent answers as soon as it is idle, so
        a longer bound costs a capture nothing unless its agent hangs."""
        return max(self.flush_timeout_s, PCS_FINISH_TIMEOUT_S) if self.pcs is not None else self.flush_timeout_s

    def stop(self, bpf: Any, target: Target, timeout_s: float = 1.0) -> bool:
        """Asks the agent to stop recording and hand over every record, and waits until it says it is idle
        (at most timeout_s); then drains. The end of an attached share or of a capture: CUPTI's ordinary
        flush keeps back a whole buffer while any record in it is of unfinished work (on an H200 running
        ResNet-50 that lost half or all of some shares' records), and what it kept went with the probes.
        The agent's stop flush is forced, made while the batch probe is still there; its flushed probe's
        started_ns is when activity stopped. The request (the stop_request semaphore) stays raised until
        the attacher closes every link (pause(), or the capture's end): the agent stays stopped until its
        batch probe goes. An agent without the request (an older build) is flushed instead. False when
        the agent did not answer."""
        if self._files and not all(af.stop for af in self._files.values()):
            return self.flush(bpf, target, timeout_s, keep_request=True)
        # idle since the request (all handed over), or never started (a failed agent says no more)
        return self._request(bpf, target, lambda af: af.stop, lambda f, t0: f.idle_ns >= t0 or f.status < 0,
                             timeout_s, keep_request=True)

    def _request(self, bpf: Any, target: Target, sites: Callable[[_AgentFile], list[usdt.UsdtProbe]],
                 answered: Callable[[DevFlush, int], bool], timeout_s: float, keep_request: bool) -> bool:
        """Raises a request semaphore (each agent file's flush or stop request) by attaching to its sites,
        waits (at most timeout_s) until dev_flush says the agent answered a request made at t0, drains;
        lowers it again unless keep_request (the caller closes every link next, this one included)."""
        if self.paused:
            return True  # pause() stopped the agent, and it has been idle since
        if self._attacher is None or not self._files:
            return False
        t0 = time.monotonic_ns()
        links: list[int] = []
        try:
            for af in self._files.values():
                links += self._attacher.attach("on_dev_request", af.path, target.pid, sites(af))
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if answered(self.flush_state(bpf), t0):
                    self.drain(bpf)
                    return True
                if self.pcs is not None:
                    self.drain(bpf)  # the stop flush's PC records can outgrow dev_pcs: read them as they come
                time.sleep(0.002)  # waiting on the agent's thread, with a deadline
            return False
        finally:
            if not keep_request:
                for fd in links:
                    self._attacher.close_link(fd)

    # --- reading -------------------------------------------------------------------------------------------

    def _on_event(self, ctx: Any, data: Any, size: int) -> None:
        e = ct.cast(data, ct.POINTER(DevEvent)).contents
        self.events.append(TraceEvent(e.type, e.start_ns, e.end_ns, e.bytes, e.name, e.graph_node, e.user_stack,
                                      e.py_stack, e.stream_handle, e.pid, e.tid, e.correlation, e.stream,
                                      e.device, e.api_id, e.kind, e.copy_kind, bool(e.known)))

    def drain(self, bpf: Any) -> None:
        """Trace mode: moves the ring buffer's events into self.events."""
        if self._ringbuf_open or self.pcs is not None:  # every ring buffer opened (trace events, PC samples)
            bpf.ring_buffer_consume()

    def buckets(self, bpf: Any) -> list[DeviceBucket]:
        return [bucket_of(k, DEV_VAL_FORMAT.unpack(v)) for k, v in self.counts.raw(bpf)]

    def raw_counts(self, bpf: Any) -> list[tuple[bytes, bytes]]:
        """The counts map's entries as (DevKey bytes, DevVal bytes) (for readers that merge them before
        decoding)."""
        return self.counts.raw(bpf)

    def names(self, bpf: Any, pid: int, want: set[int] | None = None) -> dict[int, str]:
        """Name id -> name: kernels (CUPTI's name, mangled as the compiler made it) and CUPTI's function
        names. Names BPF had to cut, and ids of `want` it could not copy (a page not resident yet), are
        read from the process while it lives."""
        out: dict[int, str] = {}
        cut: list[int] = []
        for k, v in items(bpf[b"dev_names"]):
            if k.pid != pid:
                continue
            raw = bytes(v.name).split(b"\0", 1)[0]
            if len(raw) >= DEV_NAME_LEN - 1:
                cut.append(k.addr)
            out[k.addr] = raw.decode(errors="replace")
        missing = cut + sorted(a for a in (want or set()) if a and a not in out)
        if missing:
            try:
                with ProcessMemory(pid) as mem:
                    for addr in missing:
                        full = mem.read_cstring(addr, 1 << 16)
                        if full and len(full) >= len(out.get(addr, "")):
                            out[addr] = full.decode(errors="replace")
            except (ProcessGone, OSError, MemoryError):
                pass
        return out

    def name_ids(self, buckets: list[DeviceBucket]) -> set[int]:
        """Every name id the buckets and trace events refer to (for names(want=...))."""
        ids = {b.name for b in buckets} | {b.fn_name for b in buckets}
        ids |= {e.name for e in self.events}
        ids.discard(0)
        return ids


def _dev_string(st_dev: int) -> str:
    """os.stat's st_dev as /proc/<pid>/maps prints it ("major:minor" in hex)."""
    return f"{os.major(st_dev):02x}:{os.minor(st_dev):02x}"
