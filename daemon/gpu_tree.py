"""GPU API buckets into the calling context tree: `api` nodes under their call path, with `kernel`,
`memcpy`, `memset` and `sync` children carrying calls, API time, bytes and sync wait."""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from deepctx.daemon.callpaths import CallPathResolver
from deepctx.daemon.origins import Origins
from deepctx.daemon.symbolize.native import NativeSymbolizer
from deepctx.daemon.tree import CallTree, PathNodes
from deepctx.host import gpu_apis
from deepctx.host.demangle import demangle
from deepctx.host.frames import Frame
from deepctx.probes.gpu_api import GPU_KEY_F_SAMPLED, GPU_KEY_F_STACK_LOST, GpuBucket

NOT_SAMPLED = Frame("native", "[call path not sampled]")
UNNAMED_KERNEL = "[unnamed kernel]"
# A kernel whose handle the probes could not name (made before the capture, its name not readable from it),
# in a capture without the device-activity agent's records, which name every kernel they time
NEEDS_AGENT_KERNEL = "[kernel named by the agent only]"
# Launch layouts whose object is a host stub (an address the ELF symbol table names).
_STUB_LAYOUTS = (gpu_apis.L_DIM3, gpu_apis.L_RT_EX)


_MANGLED = re.compile(r"^_Z[A-Za-z0-9_$.]+$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]{2,}$")


def name_from_handle_strings(strings: list[str], runtime_stub: bool) -> str | None:
    """A kernel name among the strings a handle's first words point to: a mangled C++ name, or (for
    runtime launch handles, whose registration keeps the device function's name) a plain identifier."""
    for s in strings:
        if _MANGLED.match(s):
            return s
    if runtime_stub:
        for s in strings:
            if _IDENTIFIER.match(s):
                return s
    return None


class KernelNamer:
    """Kernel names, best source first: the ELF symbol of a host stub; the name learned when the
    handle was created (cuModuleGetFunction & co, after attach); the name string the handle points to
    (copied in BPF at its first launch)."""

    def __init__(self, pid: int, space: Any, native: NativeSymbolizer, handle_names: dict[tuple[int, int], str],
                 handle_strings: dict[tuple[int, int], list[str]] | None = None, agent_named: bool = True) -> None:
        self.pid = pid
        self.agent_named = agent_named  # the agent's records named kernels in this capture
        self.space = space
        self.native = native
        self.handle_names = handle_names
        self.handle_strings = handle_strings or {}
        self._cache: dict[tuple[int, int], str] = {}

    def name(self, api: gpu_apis.Api, obj: int) -> str:
        key = (api.layout, obj)
        cached = self._cache.get(key)
        if cached is None:
            cached = demangle(self._name(api, obj))
            self._cache[key] = cached
        return cached

    def _name(self, api: gpu_apis.Api, obj: int) -> str:
        stub = api.layout in _STUB_LAYOUTS
        if stub:
            m = self.space.find(obj)
            if m is not None and m.executable and m.file_backed:
                f = self.native.symbolize(self.pid, self.space, obj)
                if "+0x" not in f.name:
                    return f.name
        learned = self.handle_names.get((self.pid, obj))
        if learned:
            return learned
        found = name_from_handle_strings(self.handle_strings.get((self.pid, obj), []), stub)
        return found or (UNNAMED_KERNEL if self.agent_named else NEEDS_AGENT_KERNEL)


def child_frame(api: gpu_apis.Api, b: GpuBucket, namer: KernelNamer) -> Frame | None:
    """The node below an api node: the kernel, copy, set or wait the call asked for."""
    if api.cls == gpu_apis.LAUNCH:
        return Frame("kernel", namer.name(api, b.obj), launch=(*b.grid, *b.block, b.shared_mem), stream=b.stream)
    if api.cls == gpu_apis.GRAPH:
        return Frame("kernel", f"[graph {b.obj:#x}]", stream=b.stream)
    if api.cls == gpu_apis.MEMCPY:
        return Frame("memcpy", gpu_apis.COPY_NAMES.get(b.kind, "unknown"), stream=b.stream)
    if api.cls == gpu_apis.MEMSET:
        return Frame("memset", "memset", stream=b.stream)
    if api.cls == gpu_apis.SYNC:
        return Frame("sync", api.sync_target, stream=b.stream if api.sync_target == "stream" else None)
    return None


def _metrics(api: gpu_apis.Api, calls: int, time_ns: int, nbytes: int) -> dict[str, int]:
    m = {"calls": calls, "api_time_ns": time_ns}
    if api.cls in (gpu_apis.MEMCPY, gpu_apis.MEMSET, gpu_apis.ALLOC, gpu_apis.COLLECTIVE):
        m["bytes"] = nbytes
    if api.cls == gpu_apis.SYNC:
        m["sync_wait_ns"] = time_ns
    return m


def _signature(b: GpuBucket) -> tuple:
    return (b.api.symbol, b.obj, b.stream, b.grid, b.block, b.shared_mem, b.kind, b.origin_tid, b.origin_user_stack,
            b.origin_py_stack, b.origin_label, b.origin_node)


def apportion(total: int, weights: list[int]) -> list[int]:
    """Splits an exact total in proportion to weights, rounding so the parts add up to the total."""
    s = sum(weights)
    if s == 0:
        return [0] * len(weights)
    raw = [total * w / s for w in weights]
    parts = [int(r) for r in raw]
    rest = total - sum(parts)
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - parts[i], reverse=True)[:rest]:
        parts[i] += 1
    return parts


def scale_buckets(buckets: list[GpuBucket], factor: float) -> list[GpuBucket]:
    """Counts seen while the probes were attached for part of a window, scaled up to the whole window."""
    return [replace(b, calls=round(b.calls * factor), time_ns=round(b.time_ns * factor),
                    bytes=round(b.bytes * factor)) for b in buckets]


def caller_path(resolver: CallPathResolver, tid: int, user_stack: int, py_stack: int, flags: int,
                callee: Callable[[Frame], bool]) -> list[Frame]:
    """The calling thread's path down to the code that made a GPU call: NOT_SAMPLED when the call's path
    was not captured, else the captured path without its innermost frames that belong to the callee."""
    if not flags & GPU_KEY_F_SAMPLED:
        return [resolver.thread(tid), NOT_SAMPLED]
    path = resolver.path(tid, user_stack, py_stack, lost=bool(flags & GPU_KEY_F_STACK_LOST))
    while len(path) > 1 and callee(path[-1]):
        path.pop()
    return path


def add_gpu_buckets(tree: CallTree, buckets: list[GpuBucket], resolver: CallPathResolver, namer: KernelNamer,
                    api_module: Callable[[gpu_apis.Api], str | None], origins: Origins | None = None) -> dict[str, int]:
    """Adds every bucket to the tree. Sampled captures: counts are exact per (API, kernel, launch shape);
    they are shared out over the call paths that were captured, in proportion to how often each was seen.
    Returns counters for the profile's stats."""
    origins = origins or Origins()
    paths = PathNodes(tree)
    groups: dict[tuple, list[GpuBucket]] = defaultdict(list)
    for b in buckets:
        groups[_signature(b)].append(b)
    unattributed = 0
    for group in groups.values():
        sampled = [b for b in group if b.flags & GPU_KEY_F_SAMPLED]
        if not sampled:  # no call of this kind had its path captured: keep the counts, say so
            sampled = group
            unattributed += sum(b.calls for b in group)
        calls = apportion(sum(b.calls for b in group), [b.calls for b in sampled])
        times = apportion(sum(b.time_ns for b in group), [b.calls for b in sampled])
        nbytes = apportion(sum(b.bytes for b in group), [b.calls for b in sampled])
        for b, c, t, n in zip(sampled, calls, times, nbytes, strict=True):
            lib = api_module(b.api)
            values = {m: v for m, v in _metrics(b.api, c, t, n).items() if v}
            if not values:  # no node for a bucket whose share came to nothing
                continue
            base = caller_node(paths, resolver, origins, b, b.flags, lib, in_module(lib))
            tail = [Frame("api", b.api.display, module=lib)]
            child = child_frame(b.api, b, namer)
            if child is not None:
                tail.append(child)
            leaf = tree.node_for(tail, start=base)
            for metric, value in values.items():
                tree.add_at(leaf, metric, value)
    return {"gpu_calls_without_call_path": unattributed}


def in_module(lib: str | None) -> Callable[[Frame], bool]:
    """The test for an API's own entry frame(s), which a caller path leaves out: frames of its library."""
    return lambda f: bool(lib) and f.module == lib


def caller_node(paths: PathNodes, resolver: CallPathResolver, origins: Origins, b: Any, flags: int, trim: Any,
                callee: Callable[[Frame], bool]) -> int:
    """The tree node of a bucket's caller path (a GPU or device bucket `b`): its thread's captured path
    without its innermost frames that belong to the callee (`trim` names that test for the key), under its
    origin's path when a worker launched it for another thread's hand-off or a backward node. Built and
    walked once per distinct path."""

    def frames() -> list[Frame]:
        path = caller_path(resolver, b.tid, b.user_stack, b.py_stack, flags, callee)
        if b.origin_tid:  # origin path, how the work got there, then the worker thread and its own frames
            path = origins.frames(resolver, b.origin_tid, b.origin_user_stack, b.origin_py_stack, b.origin_label,
                                  b.origin_node, path)
        return path

    # keyed by stacks as resolved (stack_key), not as stored: ids that name the same frames share a node
    stacks = (resolver.stack_key(b.user_stack, b.py_stack, bool(flags & GPU_KEY_F_STACK_LOST))
              if flags & GPU_KEY_F_SAMPLED else (0, 0))
    origin = resolver.stack_key(b.origin_user_stack, b.origin_py_stack, not b.origin_user_stack) if b.origin_tid else (0, 0)
    key = (b.tid, *stacks, flags & (GPU_KEY_F_SAMPLED | GPU_KEY_F_STACK_LOST), trim, b.origin_tid, *origin,
           b.origin_label, b.origin_node)
    return paths.node(key, frames)


def library_basenames(space: Any) -> dict[str, str]:
    """GPU library kind -> the basename mapped in the process (for api nodes' module)."""
    out: dict[str, str] = {}
    for m in space.mappings:
        if m.file_backed and m.executable:
            base = os.path.basename(m.path.removesuffix(" (deleted)"))
            kind = gpu_apis.library_kind(base)
            if kind and kind not in out:
                out[kind] = base
    return out
