"""Device activity into the calling context tree: GPU time (CUPTI's start/end of each kernel, copy and
set) on the same nodes the GPU API probes create (gpu_tree.py), under the call path that launched it.

The BPF program already summed the records per (call path key, kernel name / copy kind, device); here
each bucket's call path is resolved like the API bucket of the same key, so the kernel node that counts
a launch also carries its GPU time."""

from __future__ import annotations

import ctypes as ct
import struct
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

from deepctx.daemon.callpaths import CallPathResolver
from deepctx.daemon.gpu_tree import (
    UNNAMED_KERNEL,
    KernelNamer,
    apportion,
    caller_node,
    caller_path,
    in_module,
)
from deepctx.daemon.gpu_tree import child_frame as api_child
from deepctx.daemon.origins import Origins
from deepctx.daemon.pc_tree import add_pc_samples
from deepctx.daemon.tree import CallTree, PathNodes
from deepctx.host import gpu_apis
from deepctx.host.demangle import demangle
from deepctx.host.frames import Frame
from deepctx.probes.device_activity import (
    AGENT_STATES,
    COPY_KINDS,
    DEV_API_UNPROBED,
    DEV_GRAPH_MADE_LABEL,
    DEV_KEY_F_GRAPH,
    DEV_KEY_F_SAMPLED,
    DEV_KEY_F_UNKNOWN,
    DEV_KEY_FORMAT,
    DEV_KIND_KERNEL,
    DEV_KIND_MEMCPY,
    DEV_KIND_MEMSET,
    DEV_KIND_SYNC,
    DEV_VAL_FORMAT,
    DeviceActivity,
    DeviceBucket,
    DevKey,
    bucket_of,
)
from deepctx.probes.gpu_api import AGENT_LIBRARIES, GPU_KEY_F_SAMPLED, GPU_KEY_F_STACK_LOST, GpuKey
from deepctx.probes.pc_sampling import PcSampling

UNKNOWN_ORIGIN = Frame("thread", "[GPU work whose launch was not seen]", tid=0)
UNPROBED_API = "[CUDA call]"
_CALLBACK_MODULES = ("libdeepctx_cupti", "libcupti", "libcudart", "libcuda.so", "libamdhip64")
# The device work each API class is expected to cause: such records land on the API's own child node.
_EXPECTED = {gpu_apis.LAUNCH: DEV_KIND_KERNEL, gpu_apis.MEMCPY: DEV_KIND_MEMCPY, gpu_apis.MEMSET: DEV_KIND_MEMSET}
# CUPTI's function names are the exported symbols: a call the agent reported (the uprobes left it to the
# agent, gpu_api.left_to_agent) is shown as the API the probes would have shown.
_REPORTED = {a.symbol: a for a in gpu_apis.APIS if a.library in AGENT_LIBRARIES}


def cupti_kernel_names(buckets: list[DeviceBucket], names: dict[int, str]) -> dict[tuple[int, int], str]:
    """(pid, launch handle or host stub) -> the kernel's name as CUPTI reported it. Merged into
    KernelNamer's handle names, it names the kernels the API probes could not ([unnamed kernel]), on
    the API's node and on the device's alike."""
    out: dict[tuple[int, int], str] = {}
    for b in buckets:
        if b.kind != DEV_KIND_KERNEL or b.api_id == DEV_API_UNPROBED or b.flags & DEV_KEY_F_UNKNOWN:
            continue
        if gpu_apis.APIS[b.api_id].cls == gpu_apis.LAUNCH and b.name in names and b.obj:
            out[(b.pid, b.obj)] = names[b.name]
    return out


def record_frame(b: DeviceBucket, names: dict[int, str]) -> Frame:
    """The node of a record seen on its own (not as the expected work of its API)."""
    if b.kind == DEV_KIND_KERNEL:
        raw = names.get(b.name)
        return Frame("kernel", demangle(raw) if raw else UNNAMED_KERNEL)
    if b.kind == DEV_KIND_MEMCPY:
        return Frame("memcpy", COPY_KINDS.get(b.copy_kind, "unknown"))
    if b.kind == DEV_KIND_MEMSET:
        return Frame("memset", "memset")
    return Frame("sync", "device")


def _api_view(b: DeviceBucket) -> SimpleNamespace:
    """The fields gpu_tree's child frame reads from an API bucket (kind: the API's copy direction)."""
    return SimpleNamespace(obj=b.obj, grid=b.grid, block=b.block, shared_mem=b.shared_mem, stream=b.stream,
                           kind=b.api_kind)


def work_frames(b: DeviceBucket, namer: KernelNamer, names: dict[int, str]) -> list[Frame]:
    """The frames below the API node: the API's own child (kernel with its launch shape, copy
    direction, memset), and for graph launches the node's kernel below the graph."""
    api = gpu_apis.APIS[b.api_id]
    child = api_child(api, _api_view(b), namer)  # type: ignore[arg-type]
    if child is not None and _EXPECTED.get(api.cls) == b.kind:
        return [child]
    if child is not None and api.cls == gpu_apis.GRAPH:
        return [child, record_frame(b, names)]
    return [record_frame(b, names)]


def _signature(b: DeviceBucket) -> tuple:
    return (b.api_id, b.obj, b.stream, b.grid, b.block, b.shared_mem, b.api_kind, b.name, b.fn_name, b.kind,
            b.copy_kind, b.device, b.flags, b.origin_tid, b.origin_user_stack, b.origin_py_stack, b.origin_label,
            b.origin_node)


def add_device_buckets(tree: CallTree, buckets: list[DeviceBucket], resolver: CallPathResolver,
                       namer: KernelNamer, api_module: Callable[[gpu_apis.Api], str | None],
                       names: dict[int, str], origins: Origins | None = None) -> dict[str, int]:
    """Adds `gpu_time_ns` of every kernel, copy and set to the tree. Sampled captures: buckets whose call
    path was not captured share their time out over the captured paths of the same signature, in
    proportion to their record counts (as gpu_tree does with calls). Work a worker thread launched during
    a hand-off call (autograd backward ...) sits under that call's path, then the hand-off's label, as in
    gpu_tree. Synchronization records carry no GPU time (the API probes measure the wait). Returns
    counters for the profile's stats."""
    stats = {"device_time_in_profile_ns": 0, "device_time_unknown_launch_ns": 0,
             "device_time_without_call_path_ns": 0, "device_sync_records": 0, "device_calls_reported_by_agent": 0}
    origins = origins or Origins()
    paths = PathNodes(tree)
    groups: dict[tuple, list[DeviceBucket]] = defaultdict(list)
    for b in buckets:
        if b.kind == DEV_KIND_SYNC:
            stats["device_sync_records"] += b.count
            continue
        groups[_signature(b)].append(b)
    for group in groups.values():
        first = group[0]
        if first.flags & DEV_KEY_F_UNKNOWN:
            t = sum(b.time_ns for b in group)
            tree.add([UNKNOWN_ORIGIN, record_frame(first, names)], "gpu_time_ns", t)
            stats["device_time_unknown_launch_ns"] += t
            stats["device_time_in_profile_ns"] += t
            continue
        sampled = [b for b in group if b.call_flags & GPU_KEY_F_SAMPLED]
        if not sampled:
            sampled = group
        times = apportion(sum(b.time_ns for b in group), [b.count for b in sampled])
        # A group's buckets differ only in their call paths: the frames below the path are the group's.
        reported = reported_api(first, names) if first.api_id == DEV_API_UNPROBED else None
        if first.api_id == DEV_API_UNPROBED:  # taken in the agent's callback: CUPTI's and the runtime's frames go
            trim, callee = _CALLBACK_MODULES, _in_callback
        else:  # the API's own entry frame(s) go, as in gpu_tree
            trim = api_module(gpu_apis.APIS[first.api_id])
            callee = in_module(trim)
        made = _made_frames(first, resolver, trim) if _graph_node_made(first) else None
        if reported is not None:
            tail = [Frame("api", reported.display, module=api_module(reported)),
                    reported_work_frame(reported, first, names)]
        elif first.api_id == DEV_API_UNPROBED:
            fn = names.get(first.fn_name, UNPROBED_API) if not first.flags & DEV_KEY_F_SAMPLED else UNPROBED_API
            tail = [Frame("api", fn), record_frame(first, names)]
        else:
            api = gpu_apis.APIS[first.api_id]
            tail = [Frame("api", api.display, module=api_module(api)), *work_frames(first, namer, names)]
        if made is not None:  # a replayed graph node: where it was made, between the graph and its work
            tail = [*tail[:-1], *made, tail[-1]]
        leaves: dict[int, int] = {}  # caller node -> the tail's last node under it
        for b, t in zip(sampled, times, strict=True):
            if not t and not (reported is not None and b.count):
                continue
            b = _without_made(b) if made is not None else b
            base = caller_node(paths, resolver, origins, b, b.call_flags, trim, callee)
            leaf = leaves.get(base)
            if leaf is None:
                leaf = leaves[base] = tree.node_for(tail, start=base)
            if reported is not None:
                _add_reported_calls(tree, leaf, reported, b, stats)
            if t:
                tree.add_at(leaf, "gpu_time_ns", t)
            stats["device_time_in_profile_ns"] += t
            if not b.call_flags & GPU_KEY_F_SAMPLED:
                stats["device_time_without_call_path_ns"] += t
    return stats


GRAPH_NODE_MADE = Frame("op", "[graph node made at]")


def _graph_node_made(b: DeviceBucket) -> bool:
    """A replayed graph node's record whose key holds where the node was made (device_activity.bpf.c)."""
    return bool(b.flags & DEV_KEY_F_GRAPH) and b.origin_label == DEV_GRAPH_MADE_LABEL and b.origin_tid != 0


def _made_frames(b: DeviceBucket, resolver: CallPathResolver, trim: Any) -> list[Frame]:
    """Where a replayed graph node was made (the launch a stream capture took, a node added): the label, then
    that call's path without its thread frame (the replay's thread is above) and without the runtime's frames."""
    flags = GPU_KEY_F_SAMPLED | (0 if b.origin_user_stack else GPU_KEY_F_STACK_LOST)
    path = caller_path(resolver, b.origin_tid, b.origin_user_stack, b.origin_py_stack, flags, in_module(trim))
    return [GRAPH_NODE_MADE, *(f for f in path if f.kind != "thread")]


def _without_made(b: DeviceBucket) -> DeviceBucket:
    """The bucket as its replay's caller: the origin fields held where its node was made, not a hand-off."""
    return replace(b, origin_tid=0, origin_user_stack=0, origin_py_stack=0, origin_label=0, origin_node=0)


def _in_callback(f: Frame) -> bool:
    return (f.module or "").startswith(_CALLBACK_MODULES)


def reported_api(b: DeviceBucket, names: dict[int, str]) -> gpu_apis.Api | None:
    """The API of a call the agent reported and no uprobe saw, when the record is the work that API
    makes (a sampled capture charges other calls' records to the announced call: those are not)."""
    api = _REPORTED.get(names.get(b.fn_name, ""))
    if api is None or _EXPECTED.get(api.cls) != b.kind or b.flags & DEV_KEY_F_GRAPH:
        return None  # a graph's kernels are not launches of the API that stands for them
    return api


def reported_work_frame(api: gpu_apis.Api, b: DeviceBucket, names: dict[int, str]) -> Frame:
    """The API's child node, as gpu_tree makes it, from the record (CUPTI's kernel name and launch
    shape, the copy's direction): the same node when some calls were probed and some reported."""
    if api.cls == gpu_apis.LAUNCH:
        raw = names.get(b.name)
        return Frame("kernel", demangle(raw) if raw else UNNAMED_KERNEL, launch=(*b.grid, *b.block, b.shared_mem))
    return record_frame(b, names)


def _add_reported_calls(tree: CallTree, node: int, api: gpu_apis.Api, b: DeviceBucket,
                        stats: dict[str, int]) -> None:
    """Calls, bytes and (exact captures) API time of the reported API: one record per call, as the
    probes would have counted and timed them."""
    tree.add_at(node, "calls", b.count)
    if b.api_time_ns:
        tree.add_at(node, "api_time_ns", b.api_time_ns)
    if api.cls in (gpu_apis.MEMCPY, gpu_apis.MEMSET) and b.bytes:
        tree.add_at(node, "bytes", b.bytes)
    stats["device_calls_reported_by_agent"] += b.count


_U32 = struct.Struct("<I")
_STACKS = struct.Struct("<QQ")  # (native, Python) stack ids, adjacent in GpuKey for the caller and the origin
_CALL_STACKS, _ORIGIN_STACKS = GpuKey.user_stack.offset, GpuKey.origin_user_stack.offset
_CALL_FLAGS, _ORIGIN_TID = GpuKey.flags.offset, GpuKey.origin_tid.offset
assert DevKey.call.offset == 0 and GpuKey.py_stack.offset == _CALL_STACKS + 8
assert GpuKey.origin_py_stack.offset == _ORIGIN_STACKS + 8 and ct.sizeof(DevKey) == DEV_KEY_FORMAT.size


def coalesced(entries: list[tuple[Any, Any]], pid: int,
              stack_key: Callable[[int, int, bool], tuple[int, int]]) -> list[DeviceBucket]:
    """The counts map's entries of pid, those whose keys differ only in stack ids that resolve alike merged
    into one bucket (counts, times and bytes summed). A sampled capture stores a bucket per announced call
    and kernel after it, each announced call with stack ids of its own (a walk cut where it went astray
    keeps none of what made them new): ResNet-50's 49,500 buckets, each decoded and walked in Python, were
    most of its profile's build; merged on their raw bytes first, only the distinct ones are."""
    merged: dict[bytes, list[int]] = {}
    for k, v in entries:
        kb = bytes(k)
        if _U32.unpack_from(kb, 0)[0] != pid:
            continue
        flags = kb[_CALL_FLAGS]
        if flags & GPU_KEY_F_SAMPLED:
            ids = _STACKS.unpack_from(kb, _CALL_STACKS)
            canon = stack_key(ids[0], ids[1], bool(flags & GPU_KEY_F_STACK_LOST))
            if canon != ids:
                kb = kb[:_CALL_STACKS] + _STACKS.pack(*canon) + kb[_CALL_STACKS + 16:]
        if _U32.unpack_from(kb, _ORIGIN_TID)[0]:
            ids = _STACKS.unpack_from(kb, _ORIGIN_STACKS)
            canon = stack_key(ids[0], ids[1], not ids[0])
            if canon != ids:
                kb = kb[:_ORIGIN_STACKS] + _STACKS.pack(*canon) + kb[_ORIGIN_STACKS + 16:]
        vals = DEV_VAL_FORMAT.unpack(bytes(v))
        acc = merged.get(kb)
        if acc is None:
            merged[kb] = list(vals)
        else:
            for i, x in enumerate(vals):
                acc[i] += x
    return [bucket_of(kb, acc) for kb, acc in merged.items()]


@dataclass
class DeviceView:
    """What the device family's maps hold for one process, read once at the end of a capture."""

    buckets: list[DeviceBucket]
    names: dict[int, str]
    pcs: PcSampling | None = None  # PC sampling's part of the family, when the capture sampled PCs

    @classmethod
    def read(cls, family: DeviceActivity, bpf: Any, pid: int,
             stack_key: Callable[[int, int, bool], tuple[int, int]] | None = None) -> DeviceView:
        """The process's buckets; with `stack_key` (CallPathResolver.stack_key) those whose stacks resolve
        alike merged as they are read (see coalesced)."""
        family.drain(bpf)  # trace mode: the ring buffer's last events (no poll runs after the target exits)
        if stack_key is None:
            buckets = [b for b in family.buckets(bpf) if b.pid == pid]
        else:
            buckets = coalesced(family.raw_counts(bpf), pid, stack_key)
        return cls(buckets, family.names(bpf, pid, family.name_ids(buckets)), family.pcs)

    def scaled(self, factor: float) -> DeviceView:
        """Counts, times and bytes seen while the agent reported for part of a window, scaled up to it."""
        return DeviceView([replace(b, count=round(b.count * factor), time_ns=round(b.time_ns * factor),
                                   bytes=round(b.bytes * factor), api_time_ns=round(b.api_time_ns * factor))
                           for b in self.buckets], self.names, self.pcs)

    def kernel_names(self) -> dict[tuple[int, int], str]:
        """For KernelNamer's handle names (see cupti_kernel_names)."""
        return cupti_kernel_names(self.buckets, self.names)

    def add_to(self, tree: CallTree, resolver: CallPathResolver, namer: KernelNamer,
               api_module: Callable[[gpu_apis.Api], str | None], origins: Origins | None = None) -> dict[str, int]:
        stats = add_device_buckets(tree, self.buckets, resolver, namer, api_module, self.names, origins)
        if self.pcs is not None:  # under the kernel nodes just made (daemon/pc_tree.py)
            pcs = add_pc_samples(tree, self.pcs.data, self.pcs.options)
            stats.update(pcs.stats)
            if self.pcs.warnings is not None:  # the target's list: the capture's warnings are made from it after
                self.pcs.warnings.extend(pcs.warnings)
        return stats


def device_warnings(stats: dict[str, int]) -> list[str]:
    """What the user should know about a capture's device activity, from its stats."""
    out = []
    status = stats.get("device_agent_status", 0)
    if status < 0:
        out.append(f"no device activity: {AGENT_STATES.get(status, f'the CUPTI agent failed ({status})')}")
    if stats.get("device_agent_awaited", 0):
        out.append("no device activity: the process's environment names a deepctx agent that it has not loaded "
                   "(it has not started CUDA/HIP yet, or the agent failed to load)")
    if stats.get("device_correlations", 0) and not stats.get("device_records", 0):
        out.append("the process launched GPU work but its CUPTI agent handed over no record (was it killed "
                   "before it could flush?)")
    unknown = stats.get("device_records_unknown_correlation", 0)
    if unknown:
        out.append(f"{unknown} device records had no launch known to deepctx (launched before the capture, "
                   f"or their correlation was dropped): their GPU time is under '{UNKNOWN_ORIGIN.name}'")
    lost = (stats.get("device_records_dropped_map_full", 0) + stats.get("device_records_dropped_by_cupti", 0)
            + stats.get("device_correlations_dropped", 0) + stats.get("device_batches_cut", 0))
    if lost:
        out.append(f"{lost} device records or correlations were dropped (see the device_* stats)")
    if stats.get("device_trace_events_lost", 0):
        out.append(f"{stats['device_trace_events_lost']} trace events were lost (ring buffer full)")
    if stats.get("device_shares_lost", 0):
        out.append(f"{stats['device_shares_lost']} of {stats.get('device_shares', 0)} recorded shares handed over no "
                   "device record although the process launched GPU work: the device times are scaled up from "
                   "the others")
    return out
