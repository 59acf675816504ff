"""Loader for gpu_api.bpf.c: uprobes on CUDA / HIP / NCCL entry points, aggregated per call path in BPF."""

from __future__ import annotations

import ctypes as ct
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

from deepctx.host import gpu_apis
from deepctx.host.elf.symbols import ElfSymbols
from deepctx.host.gpu_runtimes import CONTINUED_LIBRARY
from deepctx.host.procfs import Mapping, ProcessGone, ProcessMemory, open_mapped_file
from deepctx.probes.family import FamilyDefaults, Target, read_source
from deepctx.probes.gpu_thread_names import GpuThreadNames
from deepctx.probes.maps import CountsMap, clear_stacks, entry_count, items, percpu_sum
from deepctx.probes.native_unwind import NATIVE_F_TRUNCATED
from deepctx.probes.program_share import share_of
from deepctx.probes.uprobes import UprobeAttacher, load_for_uprobes
from deepctx.probes.usdt import vaddr_to_offset

log = logging.getLogger("deepctx.gpu")

# Mirrors of gpu_api.h (tests/unit/test_probe_layouts.py checks them against the header).
GPU_KEY_F_SAMPLED = 1 << 0
GPU_KEY_F_STACK_LOST = 1 << 1
GPU_NAME_LEN = 256
GPU_STAT_CALLS, GPU_STAT_NESTED, GPU_STAT_STALE_INFLIGHT, GPU_STAT_NO_RETURN, GPU_STAT_MAP_FULL, \
    GPU_STAT_STACK_LOST, GPU_STAT_SAMPLED, GPU_STAT_NAMES_LEARNED, GPU_STAT_OBJECTS, GPU_STAT_HANDOFFS, \
    GPU_STAT_HANDED_OFF, GPU_STAT_NODES_CREATED, GPU_STAT_NODES_RUN, GPU_STAT_NODES_UNKNOWN, GPU_STAT_NODE_CALLS, \
    GPU_STAT_ADOPTED, GPU_STAT_UNTIMED, GPU_STAT__COUNT = range(18)
GPU_TYPE_NAME_LEN = 128
GPU_OBJ_WORDS = 4
GPU_OBJ_STR = 256
STAT_NAMES = {
    GPU_STAT_CALLS: "gpu_api_calls",
    GPU_STAT_NESTED: "gpu_api_nested_calls",
    GPU_STAT_STALE_INFLIGHT: "gpu_api_calls_without_return",
    GPU_STAT_NO_RETURN: "gpu_api_returns_without_call",
    GPU_STAT_MAP_FULL: "gpu_api_calls_dropped_map_full",
    GPU_STAT_STACK_LOST: "gpu_api_stacks_lost",
    GPU_STAT_SAMPLED: "gpu_api_calls_with_call_path",
    GPU_STAT_NAMES_LEARNED: "gpu_kernel_names_learned",
    GPU_STAT_OBJECTS: "gpu_kernel_handles_seen",
    GPU_STAT_HANDOFFS: "gpu_handoffs",
    GPU_STAT_HANDED_OFF: "gpu_calls_handed_off",
    GPU_STAT_NODES_CREATED: "autograd_nodes_created",
    GPU_STAT_NODES_RUN: "autograd_nodes_run_with_creator",
    GPU_STAT_NODES_UNKNOWN: "autograd_nodes_run_without_creator",
    GPU_STAT_NODE_CALLS: "gpu_calls_charged_to_node_creator",
    GPU_STAT_ADOPTED: "device_correlations_joined_to_driver_call",
    GPU_STAT_UNTIMED: "gpu_api_launches_untimed",
}


class GpuApiSpec(ct.Structure):
    _fields_ = [("api_id", ct.c_uint16), ("cls", ct.c_uint8), ("layout", ct.c_uint8), ("object_slot", ct.c_uint8),
                ("bytes_slot", ct.c_uint8), ("kind_slot", ct.c_uint8), ("stream_slot", ct.c_uint8),
                ("name_slot", ct.c_uint8), ("dtype_slot", ct.c_uint8), ("bytes_mul_slot", ct.c_uint8),
                ("bytes_scale", ct.c_uint8), ("fixed_kind", ct.c_uint8), ("flags", ct.c_uint8),
                ("node_off", ct.c_uint8), ("proc_slot", ct.c_uint16)]


GPU_SPEC_F_ENTRY_ONLY = 1 << 0
GPU_SPEC_F_DRIVER = 1 << 1
GPU_MAX_RANGES = 8
GPU_CONT_RANGES = 8
GPU_NO_CONTINUE = 0xFFFFFFFF  # a path taken without the .eh_frame continuation (gpu_api.h)
GPU_PROCS_MAX = 1024


class GpuRanges(ct.Structure):
    _fields_ = [("start", ct.c_uint64 * GPU_MAX_RANGES), ("end", ct.c_uint64 * GPU_MAX_RANGES),
                ("next_sample_ns", ct.c_uint64), ("cont_start", ct.c_uint64 * GPU_CONT_RANGES),
                ("cont_end", ct.c_uint64 * GPU_CONT_RANGES)]


class GpuAddrKey(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("pad", ct.c_uint32), ("addr", ct.c_uint64)]


class GpuKey(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("tid", ct.c_uint32), ("user_stack", ct.c_uint64), ("py_stack", ct.c_uint64),
                ("object", ct.c_uint64), ("stream", ct.c_uint64), ("grid", ct.c_uint32 * 3),
                ("block", ct.c_uint32 * 3), ("shared_mem", ct.c_uint32), ("api_id", ct.c_uint16),
                ("kind", ct.c_uint8), ("flags", ct.c_uint8), ("origin_user_stack", ct.c_uint64),
                ("origin_py_stack", ct.c_uint64), ("origin_tid", ct.c_uint32), ("origin_label", ct.c_uint16),
                ("pad", ct.c_uint16), ("origin_node", ct.c_uint64)]


class GpuNodeKey(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("pad", ct.c_uint32), ("seq", ct.c_uint64)]


class GpuNodeOrigin(ct.Structure):
    _fields_ = [("user_stack", ct.c_uint64), ("py_stack", ct.c_uint64), ("tid", ct.c_uint32), ("pad", ct.c_uint32)]


class GpuNodeRun(ct.Structure):
    _fields_ = [("user_stack", ct.c_uint64), ("py_stack", ct.c_uint64), ("node_type", ct.c_uint64),
                ("entry_sp", ct.c_uint64), ("tid", ct.c_uint32), ("label", ct.c_uint16), ("pad", ct.c_uint16)]


GPU_COMM_LEN = 16


GPU_FP_DEPTH = 128
GPU_FP_F_TRUNCATED = 1


class GpuFpStack(ct.Structure):
    _fields_ = [("depth", ct.c_uint32), ("flags", ct.c_uint32), ("cont", ct.c_uint64),
                ("ip", ct.c_uint64 * GPU_FP_DEPTH)]


class GpuComm(ct.Structure):
    _fields_ = [("comm", ct.c_char * GPU_COMM_LEN)]


class GpuOrphan(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("correlation", ct.c_uint32), ("time_ns", ct.c_uint64)]


class GpuCorrKey(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("correlation", ct.c_uint32)]


class GpuTypeName(ct.Structure):
    _fields_ = [("name", ct.c_char * GPU_TYPE_NAME_LEN)]


class GpuOrigin(ct.Structure):
    _fields_ = [("user_stack", ct.c_uint64), ("py_stack", ct.c_uint64), ("entry_sp", ct.c_uint64),
                ("tid", ct.c_uint32), ("label", ct.c_uint16), ("pad", ct.c_uint16)]


class GpuVal(ct.Structure):
    _fields_ = [("calls", ct.c_uint64), ("time_ns", ct.c_uint64), ("bytes", ct.c_uint64), ("timed", ct.c_uint64),
                ("first_ns", ct.c_uint64)]


class GpuInflight(ct.Structure):
    _fields_ = [("key", GpuKey), ("start_ns", ct.c_uint64), ("entry_sp", ct.c_uint64), ("bytes", ct.c_uint64),
                ("out_ptr", ct.c_uint64), ("name_ptr", ct.c_uint64), ("cls", ct.c_uint8), ("pad", ct.c_uint8 * 7)]


class GpuFnKey(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("pad", ct.c_uint32), ("handle", ct.c_uint64)]


class GpuObjInfo(ct.Structure):
    _fields_ = [("words", ct.c_uint64 * GPU_OBJ_WORDS), ("strs", ct.c_char * (GPU_OBJ_STR * GPU_OBJ_WORDS))]


class GpuConfig(ct.Structure):
    _fields_ = [("sample_interval_ns", ct.c_uint64), ("api_time_every", ct.c_uint64)]


@dataclass(slots=True)  # one per map entry: not frozen (a frozen init sets every field via object.__setattr__)
class GpuBucket:
    pid: int
    tid: int
    user_stack: int
    py_stack: int
    api: gpu_apis.Api
    obj: int
    stream: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    kind: int
    flags: int
    calls: int
    time_ns: int
    bytes: int
    origin_tid: int = 0  # charged to another thread's call path (0: not handed off); see daemon/origins.py
    origin_user_stack: int = 0
    origin_py_stack: int = 0
    origin_label: int = 0  # index into GpuApi.handoffs
    origin_node: int = 0  # the backward node's type (vtable address) when charged to the node's creator


ROLES = ("origin", "node_created", "node_run")


@dataclass(frozen=True)
class HandoffPoint:
    """A call that hands GPU work to other threads. Matched per library file by `library` (a regular
    expression on the file's name) and `symbol` (an exact name, or a prefix of mangled names when it
    ends with '*').

    role "origin": what other threads launch while the call runs is charged under its call path.
    role "node_created": the call returns the sequence number of a work item being created (an autograd
    node); the calling thread's path is kept under that number.
    role "node_run": the call runs one work item, whose address is argument `node_arg` (0-based) and
    whose sequence number is the 8 bytes at `node_seq_offset`; what the thread launches meanwhile is
    charged to the path that created the item, under `label` ('{node}' becomes the item's C++ type).
    """

    library: str
    symbol: str
    label: str
    role: str = "origin"
    node_arg: int = 0
    node_seq_offset: int = 0

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"hand-off point role must be one of {', '.join(ROLES)}, not {self.role!r}")
        if not 0 <= self.node_arg <= 5 or not 0 <= self.node_seq_offset <= 255:
            raise ValueError("node_arg must be within [0, 5] and node_seq_offset within [0, 255]")


# PyTorch's backward: the Python thread blocks in Engine::execute while the autograd engine's device
# threads run the backward nodes and launch their kernels.
# JAX/XLA: compiling a jitted function autotunes on a thread pool (those launches belong to the call that
# triggered the compile), executing it may launch from the runtime's threads.
_XLA_PLUGIN = r"^(xla_cuda_plugin|pjrt_c_api_gpu_plugin|xla_rocm_plugin)\.so"
# Forward <-> backward: every autograd node takes its number from at::sequence_number::get_and_increment()
# on the forward thread; Engine::evaluate_function(graph_task, Node* func, ...) runs one node on a backward
# thread. torch::autograd::Node is `struct Node : std::enable_shared_from_this<Node>` with virtual methods:
# vptr at 0, the base's weak_ptr at 8, then sequence_nr_, its first member, at 24.
_TORCH = r"^libtorch_cpu\.so"
BUILTIN_HANDOFFS = (
    HandoffPoint(_TORCH, "_ZN5torch8autograd6Engine7executeE*", "[autograd backward]"),
    HandoffPoint(_TORCH, "_ZN2at15sequence_number17get_and_incrementEv", "[autograd node created]",
                 role="node_created"),
    HandoffPoint(_TORCH, "_ZN5torch8autograd6Engine17evaluate_functionE*", "[backward of {node}]",
                 role="node_run", node_arg=2, node_seq_offset=24),
    HandoffPoint(_XLA_PLUGIN, "_ZN4pjrt19PJRT_Client_Compile*", "[xla compile]"),
    HandoffPoint(_XLA_PLUGIN, "_ZN4pjrt29PJRT_LoadedExecutable_Execute*", "[xla execute]"),
)


def builtin_handoffs(autograd_nodes: bool = True) -> tuple[HandoffPoint, ...]:
    return tuple(h for h in BUILTIN_HANDOFFS if autograd_nodes or h.role == "origin")


@dataclass
class _LibraryFile:
    kind: str
    path: str  # a path the daemon can open (through /proc/<pid>/...)
    symbols: dict[str, int]  # api symbol -> ELF virtual address
    segments: list[tuple[int, int, int]]  # PT_LOAD (p_offset, p_vaddr, p_filesz)
    probes: int = 0
    agents_calls: list[gpu_apis.Api] = field(default_factory=list)  # not probed: the agent announces them


@dataclass
class _PidState:
    slot: int  # the process's slot in gpu_ranges, which its specs name
    addrs: set[int] = field(default_factory=set)  # runtime addresses written to gpu_addrs
    mappings: set[tuple[int, str, int]] = field(default_factory=set)  # (start, dev, inode) handled
    ranges: list[tuple[int, int]] = field(default_factory=list)  # executable ranges of GPU libraries
    continued: list[tuple[int, int]] = field(default_factory=list)  # of GEMM and convolution libraries
    continued_full: bool = False  # more of them than GPU_CONT_RANGES: said once


def continued_mappings(target: Target) -> list[Mapping]:
    """The process's executable mappings of GEMM and convolution libraries, whose calls get the .eh_frame
    continuation."""
    return [m for m in target.space.mappings if m.executable and m.file_backed
            and CONTINUED_LIBRARY.match(os.path.basename(m.path.removesuffix(" (deleted)")))]


def entry_only(api: gpu_apis.Api, mode: str) -> bool:
    """Sampled mode counts calls that return at once (launches, async copies and sets, collectives) at
    entry: no return probe, so no API time, at half the cost per call."""
    if mode != "sampled":
        return False
    return api.cls in (gpu_apis.LAUNCH, gpu_apis.GRAPH, gpu_apis.COLLECTIVE, gpu_apis.OTHER) or _async_copy_or_set(api)


def _async_copy_or_set(api: gpu_apis.Api) -> bool:
    return api.cls in (gpu_apis.MEMCPY, gpu_apis.MEMSET) and "Async" in api.symbol


# The libraries whose calls the CUPTI agent announces in the calling thread (its correlation probe).
AGENT_LIBRARIES = frozenset({"cudart", "cuda"})


def left_to_agent(api: gpu_apis.Api) -> bool:
    """Calls that return at once and whose device work CUPTI records one by one (launches, async copies
    and sets): with the agent there, its correlation probe takes their call path and their records give
    the count, kernel and launch shape, so no uprobe traps them. Synchronous calls keep their probes:
    their time is the wait the user needs. The kernel-handle lookups (cuModuleGetFunction & co) are
    probed only to name what probed launches run; the agent's records name their kernels, so they go
    too (cuDNN looks kernels up at every execution: ~380 lookups a ResNet-50 step, two traps each)."""
    return api.library in AGENT_LIBRARIES and (api.cls in (gpu_apis.LAUNCH, gpu_apis.GETFUNC, gpu_apis.FUNC_ALIAS)
                                               or _async_copy_or_set(api))


def api_time_ns(v: Any) -> int:
    """A key's API time: its first timed call's as measured, the others' measured on the timed calls and
    scaled to all the calls after the first (every call is timed but launches left untimed,
    GpuConfig.api_time_every; calls counted at entry have no time). With only the first call timed, that
    call stands for all."""
    first, rest, calls, timed = int(v.first_ns), int(v.time_ns), int(v.calls), int(v.timed)
    if not first:
        return rest if not timed or timed >= calls else rest * calls // timed
    if not timed:
        return first * calls
    return first + (rest if timed >= calls - 1 else rest * (calls - 1) // timed)


class GpuApi(FamilyDefaults):
    """Probe family "gpu". mode "exact" captures the call path of every call; "sampled" of at most
    `sampled_paths_per_s` calls a second, spread over time (the first call after each interval on each
    CPU); every call is still counted, with its arguments, bytes and time."""

    name = "gpu"

    def __init__(self, mode: str = "exact", required: bool = False, sampled_paths_per_s: int = 2000,
                 count_entries: int = 65536, stack_entries: int = 16384, symbol_cache: Any = None,
                 dwarf_stacks: bool = False, handoffs: tuple[HandoffPoint, ...] = BUILTIN_HANDOFFS,
                 node_entries: int = 65536, windows: bool = False, api_time_every: int = 8,
                 native_continue: bool = False) -> None:
        if mode not in ("exact", "sampled"):
            raise ValueError(f"unknown GPU capture mode {mode!r} (exact or sampled)")
        self.mode = mode
        self.required = required
        self.symbol_cache = symbol_cache  # the daemon's SymbolCache: ELF files are read once for all uses
        self.dwarf_stacks = dwarf_stacks
        # where the frame-pointer walk is lost, the .eh_frame walk of the unwinder family (composed in the same
        # program) takes over: GPU_FP_CONTINUE; its stacks are read back through `unwinder`
        self.native_continue = native_continue
        self.unwinder: Any = None
        # Sampled mode keeps its cost bounded by the sampling rate: the per-node probes (one capture per
        # autograd node created) are left out, and backward work stays under the backward() line.
        self.handoffs = handoffs if mode == "exact" else tuple(h for h in handoffs if h.role == "origin")
        self.node_entries = node_entries
        self.handoffs_found: list[str] = []  # "label: library symbol" for the status and the profile
        self.sampled_paths_per_s = sampled_paths_per_s
        if api_time_every < 1 or api_time_every & (api_time_every - 1):
            raise ValueError(f"api_time_every must be a power of two, not {api_time_every}")
        # Where uprobe sessions are (Linux 6.13+), a launch's return is probed on the first call of each path
        # and every api_time_every-th after it; the others skip their return trap (issue #31's cost model).
        self.api_time_every = api_time_every
        self.count_entries = count_entries
        self.stack_entries = stack_entries
        ncpus = os.cpu_count() or 1
        self.sample_interval_ns = 0 if mode == "exact" else int(1e9 * ncpus / max(1, sampled_paths_per_s))
        self._files: dict[tuple[str, int], _LibraryFile | None] = {}
        self._pids: dict[int, _PidState] = {}
        self.libraries_attached: list[str] = []
        self._uprobes: UprobeAttacher | None = None
        self._full_strings: dict[tuple[int, int], list[str]] = {}
        self._objects_read: dict[int, int] = {}  # pid -> GPU_STAT_OBJECTS when gpu_objects was last read for it
        self.comms = GpuThreadNames()
        self.resumes = 0  # duty cycle: times the probes were attached again
        self.stack_clears = 0  # continuous mode: times the stack map was emptied at a window's end
        self.counts = CountsMap("gpu_counts", windows)  # windows: continuous mode cuts them
        self.pid: int | None = None
        self._live = 1  # the probes are attached: 1, detached: 0, being switched: -1 (see pause)
        # Set before attach when the target's CUPTI agent reports its calls (left_to_agent()); cleared by
        # probe_agents_calls() when the agent turns out not to work.
        self.agent_reports_calls = False

    # --- ProbeFamily ------------------------------------------------------------------------------

    def source(self) -> str:
        return read_source("gpu_api.bpf.c")

    def defines(self) -> dict[str, int | str]:
        return {"GPU_COUNT_ENTRIES": self.count_entries, "GPU_COUNT_SPARE": self.counts.spare_entries(self.count_entries),
                "GPU_COUNT_FLAGS": self.counts.flags(),
                "GPU_NODE_ENTRIES": self.node_entries, "GPU_ADDR_ENTRIES": 8192, "GPU_NAME_ENTRIES": 65536,
                "GPU_OBJECT_ENTRIES": 8192, **({"GPU_DWARF_STACKS": 1} if self.dwarf_stacks else {}),
                **({"GPU_FP_CONTINUE": 1, "NATIVE_MEMO": 1} if self.native_continue else {}),
                "GPU_INFLIGHT_ENTRIES": 16384, "GPU_STACK_ENTRIES": self.stack_entries}

    def load(self, bpf: Any) -> None:
        load_for_uprobes(bpf, ["on_gpu_api_entry", "on_gpu_api_return"],
                         session=["on_gpu_api_session", "on_gpu_api_session_return"])
        self._link_session_return(bpf)

    @staticmethod
    def _link_session_return(bpf: Any) -> None:
        """The session program's returns go on in on_gpu_api_session_return (a tail call): once it is loaded
        as a session program (a tail call's target must be of the caller's kind)."""
        from bcc import BPF

        from deepctx.probes.uprobes import BPF_TRACE_UPROBE_SESSION, uprobe_sessions

        if not uprobe_sessions():  # the attach takes entry and return probes
            return
        try:
            fn = bpf.load_func(b"on_gpu_api_session_return", BPF.KPROBE, attach_type=BPF_TRACE_UPROBE_SESSION)
        except Exception:  # no uprobe sessions here: the attach falls back to entry and return probes
            return
        bpf[b"gpu_session_return"][ct.c_int(0)] = ct.c_int(fn.fd)

    def prepare(self, target: Target) -> None:
        if not self.required and not self._library_mappings(target):
            raise ValueError("no GPU runtime library (libcuda, libcudart, libamdhip64, libnccl, librccl) is loaded")

    def attach(self, bpf: Any, target: Target) -> None:
        # in the target alone: other processes that map the same libraries do not trap
        self.pid = target.pid
        self.counts.bind(bpf)
        self._link_session_return(bpf)  # (a program compiled without the pool, as tests do, was not load()ed)
        self._uprobes = UprobeAttacher(bpf, "on_gpu_api_entry", "on_gpu_api_return", pid=target.pid,
                                       session_fn="on_gpu_api_session")
        bpf[b"gpu_config"][ct.c_int(0)] = GpuConfig(self.sample_interval_ns, 1)
        self._attach_new(bpf, target)
        # launches left untimed only where their return is left alone too: under separate entry and return
        # probes the return's trap is paid either way, and every call might as well be timed
        bpf[b"gpu_config"][ct.c_int(0)] = GpuConfig(self.sample_interval_ns, self.time_every())

    def continued_slot(self, pid: int) -> int | None:
        """The process's slot in gpu_ranges, where its GEMM libraries' ranges are, when its walks are continued
        (device activity's paths are taken with it: probes/device_activity.bpf.c); None otherwise."""
        state = self._pids.get(pid)
        return state.slot if state is not None and self.native_continue else None

    def time_every(self) -> int:
        """1 launch in how many of each call path is timed (1: all; sessions decide on first attach)."""
        return self.api_time_every if self._uprobes is not None and self._uprobes.session else 1

    def poll(self, bpf: Any, target: Target) -> None:
        self._attach_new(bpf, target)
        self._read_full_names(bpf, target.pid)

    def detach(self, bpf: Any, target: Target) -> None:
        if self._uprobes is not None:
            self._uprobes.close()
        self.counts.forget(bpf, target.pid)
        self.comms.forget(bpf, target.pid)
        self._objects_read.pop(target.pid, None)
        state = self._pids.pop(target.pid, None)
        if state is None:
            return
        bpf[b"gpu_ranges"][ct.c_uint32(state.slot)] = GpuRanges()
        share_of(bpf).release_slot("gpu_ranges", target.pid)
        table = bpf[b"gpu_addrs"]
        for addr in state.addrs:
            try:
                del table[GpuAddrKey(target.pid, 0, addr)]
            except KeyError:
                pass

    @property
    def can_pause(self) -> bool:
        """The probes can be detached and attached again (uprobe_multi links)."""
        return self._uprobes is not None and self._uprobes.can_pause

    def pause(self) -> None:
        """Continuous mode's duty cycle: detach the uprobes (the maps and what they learned stay)."""
        if self.can_pause and self._live == 1:
            assert self._uprobes is not None
            self._live = -1  # switching: some probes may still fire
            self._uprobes.pause()
            self._live = 0

    def resume(self) -> None:
        if self._uprobes is not None and self._uprobes.paused:
            self._live = -1
            self._uprobes.resume()
            self.resumes += 1
            self._live = 1

    @property
    def attached(self) -> bool:
        return self._uprobes is not None and self._live == 1

    def take_window(self, bpf: Any, target: Target, cut: int) -> None:
        """Continuous mode, at a window's cut: its calls leave the map (the next window's count from zero
        there); names and handles stay known."""
        self.counts.take(bpf, target.pid, cut)
        self.comms.at_cut(bpf, target.pid)

    def clear_window(self, bpf: Any, target: Target, stacks_free: bool) -> None:
        """Continuous mode, after a window was built. The stack map stays until it is half full: calls made
        while the window was built, and a hand-off call (or a device record) that spans its end, hold stack
        ids from it, which must still name their stacks. When it is cleared, so are the hand-offs' holders:
        their work falls back to the worker's own path rather than to none. (stacks_free: no capture on the
        program has counts left to build, probes/program_share.py.)"""
        self.counts.release()
        self.comms.after_window(bpf, target.pid)
        stacks = bpf[b"gpu_stacks"]
        if stacks_free and entry_count(stacks) > self.stack_entries // 2:
            clear_stacks(stacks, bpf[b"gpu_stacks_gen"])
            for name in (b"gpu_origins", b"gpu_node_origins", b"gpu_node_runs"):
                bpf[name].clear()
            self.stack_clears += 1

    def stats(self, bpf: Any) -> dict[str, int]:
        table = bpf[b"gpu_stats"]
        out = {STAT_NAMES[i]: percpu_sum(table, i) for i in range(GPU_STAT__COUNT)}
        out["gpu_sample_interval_ns"] = self.sample_interval_ns
        out["gpu_api_time_every"] = self.time_every()
        out["gpu_uprobe_sessions"] = int(bool(self._uprobes and self._uprobes.session))
        out["gpu_libraries_attached"] = len(self.libraries_attached)
        out["gpu_uprobes"] = self._uprobes.probes if self._uprobes else 0
        out["gpu_probes_attached"] = self._live if self._uprobes is not None else 0
        out["gpu_probe_resumes"] = self.resumes
        out["gpu_stack_map_clears"] = self.stack_clears
        if self.native_continue:  # the continuation's memo (native_stack_capture_memo): its walks reused, taken
            memo = self.unwinder.stats(bpf) if self.unwinder is not None else {}
            out["native_continue_memo_hits"] = memo.get("memo_hits", 0)
            out["native_continue_memo_misses"] = memo.get("memo_misses", 0)
        return out

    # --- attaching ------------------------------------------------------------------------------------

    def _library_mappings(self, target: Target) -> list[tuple[str, Mapping]]:
        out = []
        for m in target.space.mappings:
            if m.executable and m.file_backed:
                kind = gpu_apis.library_kind(os.path.basename(m.path.removesuffix(" (deleted)")))
                if kind:
                    out.append((kind, m))
        return out

    def _load_file(self, pid: int, kind: str, m: Mapping) -> _LibraryFile | None:
        if m.file_key in self._files:
            return self._files[m.file_key]
        lib: _LibraryFile | None
        try:
            path = open_mapped_file(pid, m)
            elf = self.symbol_cache.get(pid, m) if self.symbol_cache else ElfSymbols(path)
            if elf is None:
                raise ValueError("not a readable ELF file")
            symbols = elf.addresses_of({a.symbol for _, a in gpu_apis.BY_LIBRARY[kind]})
            segments = [(seg.offset, seg.vaddr, seg.filesz) for seg in elf.segments]
            lib = _LibraryFile(kind, path, symbols, segments)
        except (OSError, ValueError) as e:
            log.warning("cannot read GPU library", extra={"path": m.path, "error": str(e)})
            lib = None
        self._files[m.file_key] = lib
        return lib

    def _attach_handoffs(self, bpf: Any, target: Target, state: _PidState) -> None:
        table = bpf[b"gpu_addrs"]
        for m in target.space.mappings:
            if not (m.executable and m.file_backed):
                continue
            base = os.path.basename(m.path.removesuffix(" (deleted)"))
            for label_id, point in enumerate(self.handoffs):
                ident = (m.start, m.dev, m.inode + (label_id << 48))
                if ident in state.mappings or not re.search(point.library, base):
                    continue
                state.mappings.add(ident)
                try:
                    path = open_mapped_file(target.pid, m)
                    elf = self.symbol_cache.get(target.pid, m) if self.symbol_cache else ElfSymbols(path)
                except OSError:
                    continue
                if elf is None:
                    continue
                if point.symbol.endswith("*"):
                    symbols = elf.addresses_with_prefix(point.symbol[:-1])
                else:
                    symbols = elf.addresses_of({point.symbol})
                segments = [(seg.offset, seg.vaddr, seg.filesz) for seg in elf.segments]
                offsets = []
                for name, vaddr in symbols.items():
                    off = vaddr_to_offset(segments, vaddr)
                    if off is None or not (m.offset <= off < m.offset + (m.end - m.start)):
                        continue
                    offsets.append(off)
                    addr = m.start + off - m.offset
                    table[GpuAddrKey(target.pid, 0, addr)] = _handoff_spec(label_id, point, state.slot)
                    state.addrs.add(addr)
                    self.handoffs_found.append(f"{point.label}: {base} {name}")
                if not offsets:
                    target.warnings.append(
                        f"hand-off point {point.label} ({point.symbol}) not found in {base}: GPU work its worker "
                        f"threads launch stays under those threads")
                    continue
                assert self._uprobes is not None
                self._uprobes.attach(path, offsets)
                log.info("hand-off point attached", extra={"label": point.label, "library": base,
                                                          "symbols": len(offsets)})

    def _attach_new(self, bpf: Any, target: Target) -> None:
        state = self._pids.get(target.pid)
        if state is None:  # the process's slot, emptied of a process that had it before
            state = self._pids[target.pid] = _PidState(share_of(bpf).claim_slot("gpu_ranges", target.pid, GPU_PROCS_MAX))
            bpf[b"gpu_ranges"][ct.c_uint32(state.slot)] = GpuRanges()
        self._attach_handoffs(bpf, target, state)
        if self.native_continue:
            self._add_continued(bpf, target, state)
        table = bpf[b"gpu_addrs"]
        for kind, m in self._library_mappings(target):
            ident = (m.start, m.dev, m.inode)
            if ident in state.mappings:
                continue
            state.mappings.add(ident)
            self._add_range(bpf, target.pid, state, m)
            lib = self._load_file(target.pid, kind, m)
            if lib is None:
                continue
            if lib.probes == 0:
                self._attach_uprobes(lib)
                self.libraries_attached.append(os.path.basename(m.path))
            # Where each API sits in this process: the entry probe finds the API by this address.
            for api_id, api in gpu_apis.BY_LIBRARY[kind]:
                vaddr = lib.symbols.get(api.symbol)
                if vaddr is None:
                    continue
                off = vaddr_to_offset(lib.segments, vaddr)
                if off is None or not (m.offset <= off < m.offset + (m.end - m.start)):
                    continue
                addr = m.start + off - m.offset
                table[GpuAddrKey(target.pid, 0, addr)] = _spec(api_id, api, self.mode, state.slot)
                state.addrs.add(addr)

    def _add_continued(self, bpf: Any, target: Target, state: _PidState) -> None:
        """The executable ranges of the GEMM and convolution libraries the process has mapped (cuBLAS loads at
        the first matmul: each poll looks again), in gpu_ranges.cont_*: the calls made from them get the
        .eh_frame continuation."""
        new = [(m.start, m.end) for m in continued_mappings(target) if (m.start, m.end) not in state.continued]
        if not new:
            return
        room = GPU_CONT_RANGES - len(state.continued)
        if len(new) > room:
            if not state.continued_full:  # each poll finds them again
                log.warning("too many GEMM and convolution library mappings: the calls from the rest are not "
                            "continued", extra={"pid": target.pid, "mappings": len(new) - room})
            state.continued_full = True
            new = new[:room]
            if not new:
                return
        state.continued.extend(new)
        table = bpf[b"gpu_ranges"]
        r = table[ct.c_uint32(state.slot)]  # keeps the other fields
        for i, (lo, hi) in enumerate(state.continued):
            r.cont_start[i], r.cont_end[i] = lo, hi
        table[ct.c_uint32(state.slot)] = r

    def _add_range(self, bpf: Any, pid: int, state: _PidState, m: Mapping) -> None:
        if len(state.ranges) >= GPU_MAX_RANGES:
            log.warning("too many GPU library mappings to tell nested calls apart", extra={"pid": pid})
            return
        state.ranges.append((m.start, m.end))
        table = bpf[b"gpu_ranges"]
        r = table[ct.c_uint32(state.slot)]  # keeps sampled mode's next_sample_ns
        for i, (lo, hi) in enumerate(state.ranges):
            r.start[i], r.end[i] = lo, hi
        table[ct.c_uint32(state.slot)] = r

    def probe_agents_calls(self) -> None:
        """The agent does not report after all (it failed to start): probe the calls left to it."""
        self.agent_reports_calls = False
        for lib in self._files.values():
            if lib is not None and lib.agents_calls:
                apis, lib.agents_calls = lib.agents_calls, []
                self._attach_uprobes(lib, apis)

    def _attach_uprobes(self, lib: _LibraryFile, only: list[gpu_apis.Api] | None = None) -> None:
        both: set[int] = set()
        entry: set[int] = set()
        apis = only if only is not None else [api for _, api in gpu_apis.BY_LIBRARY[lib.kind]]
        if only is None and self.agent_reports_calls:
            lib.agents_calls = [api for api in apis if left_to_agent(api)]
            apis = [api for api in apis if not left_to_agent(api)]
        for api in apis:
            vaddr = lib.symbols.get(api.symbol)
            off = vaddr_to_offset(lib.segments, vaddr) if vaddr is not None else None
            if off is not None:  # aliases (ncclX / pncclX) share one offset
                (entry if entry_only(api, self.mode) else both).add(off)
        assert self._uprobes is not None
        before = self._uprobes.probes
        self._uprobes.attach(lib.path, sorted(both), entry_only=sorted(entry - both))  # one link where sessions work
        lib.probes += self._uprobes.probes - before
        log.info("GPU probes attached", extra={"library": lib.path, "kind": lib.kind, "probes": lib.probes,
                                               "left_to_the_agent": len(lib.agents_calls),
                                               "uprobe_multi": self._uprobes.multi})

    # --- reading --------------------------------------------------------------------------------------

    def buckets(self, bpf: Any) -> list[GpuBucket]:
        out = []
        for k, v in self.counts.items(bpf, self.pid):
            api = gpu_apis.APIS[k.api_id]
            grid = (k.grid[0], k.grid[1], k.grid[2])
            block = (k.block[0], k.block[1], k.block[2])
            if api.symbol.startswith("_Z24hipExtModuleLaunchKernel"):  # global work sizes, in threads
                grid = tuple(g // b if b else g for g, b in zip(grid, block, strict=True))  # type: ignore[assignment]
            out.append(GpuBucket(k.pid, k.tid, k.user_stack, k.py_stack, api, k.object, k.stream, grid, block,
                                 k.shared_mem, k.kind, k.flags, v.calls, api_time_ns(v), v.bytes, k.origin_tid,
                                 k.origin_user_stack, k.origin_py_stack, k.origin_label, k.origin_node))
        return out

    def thread_names(self, bpf: Any, pid: int) -> dict[int, str]:
        """tid -> name at its first GPU call, for process pid's threads that made GPU calls (short-lived ones
        included)."""
        return self.comms.names(bpf, pid)

    def node_types(self, bpf: Any, pid: int) -> dict[int, str]:
        """vtable address -> class name of the work items (autograd nodes) run in process pid."""
        from deepctx.host.demangle import type_display_name

        return {k.handle: type_display_name(bytes(v.name).split(b"\0", 1)[0].decode(errors="replace"))
                for k, v in items(bpf[b"gpu_node_types"]) if k.pid == pid}

    def function_names(self, bpf: Any) -> dict[tuple[int, int], str]:
        return {(k.pid, k.handle): bytes(v.name).split(b"\0", 1)[0].decode(errors="replace")
                for k, v in items(bpf[b"gpu_fn_names"])}

    def _object_infos(self, bpf: Any) -> dict[tuple[int, int], GpuObjInfo]:
        # bcc's own type for the value is unreliable for char arrays: reread its bytes with ours
        return {(k.pid, k.handle): GpuObjInfo.from_buffer_copy(ct.string_at(ct.addressof(v), ct.sizeof(GpuObjInfo)))
                for k, v in items(bpf[b"gpu_objects"])}

    def _read_full_names(self, bpf: Any, pid: int) -> None:
        """BPF keeps the first GPU_OBJ_STR bytes of each string; C++ kernel names are often longer. While
        the process lives, read the strings that fill the prefix whole. The map is read again only once a new
        object was recorded (its counter moved; the program's, so any process's): reading the whole map at
        every poll cost each capture of a PyTorch process 10% of its CPU (development VM, 2026-12-05)."""
        seen = percpu_sum(bpf[b"gpu_stats"], GPU_STAT_OBJECTS)  # before the map: a later object moves it again
        if self._objects_read.get(pid) == seen:
            return
        self._objects_read[pid] = seen
        new = [(key, info) for key, info in self._object_infos(bpf).items()
               if key[0] == pid and key not in self._full_strings]
        if not new:
            return
        try:
            mem = ProcessMemory(pid)
        except ProcessGone:
            return
        with mem:
            for key, info in new:
                strings = _prefixes(info)
                for i, prefix in enumerate(strings):
                    if len(prefix) >= GPU_OBJ_STR - 1:
                        full = mem.read_cstring(info.words[i], limit=8192)
                        if full.startswith(prefix.encode(errors="replace")[:64]):
                            strings[i] = full.decode(errors="replace")
                self._full_strings[key] = strings

    def handle_strings(self, bpf: Any) -> dict[tuple[int, int], list[str]]:
        """(pid, kernel handle) -> the strings its first words point to (see gpu_obj_info), whole where
        they were read from the live process, else as BPF copied them."""
        out = {key: _prefixes(info) for key, info in self._object_infos(bpf).items()}
        out.update(self._full_strings)
        return out

    def stack_ids(self, bpf: Any) -> list[int]:
        """The ids of every native stack stored so far, as buckets name them."""
        return [k.value for k in bpf[b"gpu_stacks"].keys()]

    def user_stack(self, bpf: Any, stack_id: int) -> tuple[list[int], bool]:
        """Native stack of a sampled call (0 means none); KeyError when it is not (or no longer) kept."""
        table = bpf[b"gpu_stacks"]
        st = table[table.Key(stack_id)]
        ips = list(st.ip[:min(st.depth, GPU_FP_DEPTH)])
        truncated = bool(st.flags & GPU_FP_F_TRUNCATED)
        if st.cont and self.unwinder is not None:  # the .eh_frame walk from the frame it was lost at
            more, flags = self.unwinder.stack(bpf, int(st.cont))
            if more and ips and more[0] == ips[-1]:
                ips += more[1:]
                truncated = bool(flags & NATIVE_F_TRUNCATED)
        return ips, truncated


GPU_NO_SLOT = 0xFF


def _slot(slot: int) -> int:
    return GPU_NO_SLOT if slot < 0 else slot


def _prefixes(info: GpuObjInfo) -> list[str]:
    # not info.strs: ctypes cuts a char array field at its first NUL, and the slots are NUL-separated
    raw = ct.string_at(ct.addressof(info) + GpuObjInfo.strs.offset, GpuObjInfo.strs.size)
    return [raw[i * GPU_OBJ_STR:(i + 1) * GPU_OBJ_STR].split(b"\0", 1)[0].decode(errors="replace")
            for i in range(GPU_OBJ_WORDS)]


_ROLE_CLASS = {"origin": gpu_apis.HANDOFF, "node_created": gpu_apis.NODE_CREATED, "node_run": gpu_apis.NODE_RUN}


def _handoff_spec(label_id: int, point: HandoffPoint, proc_slot: int) -> GpuApiSpec:
    spec = GpuApiSpec(label_id, _ROLE_CLASS[point.role], 0, *([GPU_NO_SLOT] * 7), 1, gpu_apis.UNKNOWN_KIND, 0)
    spec.proc_slot = proc_slot
    if point.role == "node_run":
        spec.object_slot = point.node_arg
        spec.node_off = point.node_seq_offset
    return spec


def _spec(api_id: int, api: gpu_apis.Api, mode: str, proc_slot: int) -> GpuApiSpec:
    return GpuApiSpec(api_id, api.cls, api.layout, _slot(api.object_slot), _slot(api.bytes_slot), _slot(api.kind_slot),
                      _slot(api.stream_slot), _slot(api.name_slot), _slot(api.dtype_slot), _slot(api.bytes_mul_slot),
                      api.bytes_scale, api.fixed_kind,
                      (GPU_SPEC_F_ENTRY_ONLY if entry_only(api, mode) else 0) | (GPU_SPEC_F_DRIVER if api.library == "cuda" else 0),
                      0, proc_slot)
