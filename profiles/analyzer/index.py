"""One pass over a profile document: every GPU node and every CPU sample with the context the rules need
(thread, Python call path, the user's line, the framework operator, compile-time or steady state)."""

from __future__ import annotations

import gc
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from deepctx.host.frames import DEEPCTX_PROBE
from deepctx.profiles.analyzer import apis
from deepctx.profiles.analyzer.names import (
    is_compile_frame,
    is_data_loader_frame,
    is_graph_call_frame,
    is_library_frame,
    is_wrapper_file,
    operator_of,
)
from deepctx.profiles.analyzer.pcs import KernelPcs, kernel_pcs
from deepctx.profiles.fold import OPERATOR_PREFIX, is_operator

GPU_KINDS = frozenset({"kernel", "memcpy", "memset", "sync"})


@dataclass(frozen=True)
class Site:
    """A Python source line (or, for work with no Python frame, the nearest meaningful native frame).

    Two frames on one line are one site (a function and the generator expression or lambda on its line)."""

    file: str | None
    line: int | None
    function: str
    library: bool = field(default=False, compare=False)  # installed package or standard library
    _key: tuple[str | None, int | None, str | None] = field(init=False, repr=False, compare=False)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = (self.file, self.line, None) if self.file else (None, None, self.function)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Site) and self._key == other._key)

    def __hash__(self) -> int:
        return self._hash

    def label(self) -> str:
        if self.file is None:
            return self.function
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class Context:
    """What is known about a node from its ancestors; shared by siblings, replaced only when it changes."""

    tid: int | None = None
    thread: str | None = None
    python: tuple[Site, ...] = ()
    user: int = -1  # index in python of the innermost frame of the user's own code
    loader: int = -1  # index in python of the outermost torch.utils.data frame
    native: str | None = None  # innermost native frame outside GPU runtime libraries
    op: str | None = None  # innermost framework operator (wrapper_CUDA_mul_Tensor -> mul)
    operator: str | None = None  # innermost operator node, as named (aten::mul.Tensor)
    api: str | None = None  # the API node above a kernel/memcpy/memset/sync node
    in_api: bool = False  # inside a probed GPU API function (CPU samples there are API time)
    api_entry: str | None = None  # the outermost probed GPU API function the sample is in
    in_probe: bool = False  # in deepctx's own probe (DEEPCTX_PROBE): watching's cost, not the call's
    compile: bool = False  # under compilation or autotuning frames
    in_graph: bool = False  # inside a call of a torch.compile'd graph (its runtime wrappers: names.is_graph_call_frame)
    in_wrapper: bool = False  # inside Inductor's generated code (launching the graph's kernels)
    collective: bool = False  # under a collective API (NCCL/RCCL)

    @property
    def site(self) -> Site | None:
        """Where a fix goes: the innermost user frame, else the innermost Python frame, else the native one."""
        if self.user >= 0:
            return self.python[self.user]
        if self.python:
            return self.python[-1]
        if self.native:
            return Site(None, None, self.native)
        return None

    @property
    def issuer(self) -> Site | None:
        """The innermost Python frame: the line that called into the framework (maybe library code)."""
        return self.python[-1] if self.python else None

    def call_path(self, upto: int | None = None) -> tuple[Site, ...]:
        end = self.user if upto is None else upto
        return self.python[:end + 1] if end >= 0 else self.python


@dataclass
class GpuRecord:
    """A kernel, copy, set or sync node (with the API that caused it), or an API node with values of its own
    (allocations, frees, collectives, stream waits)."""

    kind: str
    name: str
    api: str
    api_class: str
    ctx: Context
    calls: int
    api_time_ns: int
    gpu_time_ns: int
    bytes: int
    sync_wait_ns: int
    grid: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    stream: int | None = None
    pcs: KernelPcs | None = None  # kernel nodes of PC-sampling captures: their instructions (pcs.py)
    shared_mem: int | None = None  # kernel nodes: dynamic shared memory per block (bytes)
    compiled_from: dict[str, Any] | None = None  # kernels of torch.compile'd code: their model lines (formats.md)

    @property
    def blocks(self) -> int | None:
        if not self.grid:
            return None
        g = self.grid
        return g[0] * (g[1] if len(g) > 1 else 1) * (g[2] if len(g) > 2 else 1)

    @property
    def threads(self) -> int | None:
        if not self.block or self.blocks is None:
            return None
        b = self.block
        return self.blocks * b[0] * (b[1] if len(b) > 1 else 1) * (b[2] if len(b) > 2 else 1)


@dataclass
class ThreadStats:
    tid: int
    name: str
    samples: int = 0
    api_samples: int = 0  # samples inside GPU API functions
    api_time_ns: int = 0
    sync_wait_ns: int = 0
    gpu_calls: int = 0
    python: bool = False


@dataclass
class SampleGroup:
    """CPU samples of one thread attributed to one site."""

    samples: int = 0
    api_samples: int = 0
    # of api_samples: inside launch calls' own code (deepctx's probes left out): what a launch costs the host
    # inside the call, from samples (rules/common.launch_call_ns)
    launch_call_samples: int = 0
    loader_samples: int = 0
    compile_samples: int = 0  # compiling, tracing, autotuning: one-time work
    # running a torch.compile'd graph (not API or compile time): work outside the line's own code; of it, the
    # calls' fixed cost (runtime wrappers, outside the generated code that launches the kernels)
    graph_samples: int = 0
    graph_call_samples: int = 0


@dataclass
class ProfileIndex:
    doc: dict[str, Any]
    gpu: list[GpuRecord] = field(default_factory=list)
    threads: dict[int, ThreadStats] = field(default_factory=dict)
    # (tid, site) -> samples; samples with no site are under (tid, None)
    samples: dict[tuple[int | None, Site | None], SampleGroup] = field(default_factory=lambda: defaultdict(SampleGroup))
    site_samples: dict[Site | None, SampleGroup] = field(default_factory=lambda: defaultdict(SampleGroup))  # all threads
    # data loading on each thread: (tid, the user's line that iterates the loader) -> samples, and the
    # user code it ran (a Dataset's __getitem__) -> samples
    loader_sites: dict[tuple[int | None, Site | None], int] = field(default_factory=lambda: defaultdict(int))
    loader_user_code: dict[tuple[int | None, Site], int] = field(default_factory=lambda: defaultdict(int))
    # (tid, iterating line) -> samples in a single-process loader (num_workers=0) and in a worker-based one
    loader_single: dict[tuple[int | None, Site | None], int] = field(default_factory=lambda: defaultdict(int))
    loader_multi: dict[tuple[int | None, Site | None], int] = field(default_factory=lambda: defaultdict(int))
    # a representative Python call path per site (the one with the most weight seen)
    paths: dict[Site, tuple[Site, ...]] = field(default_factory=dict)
    _path_weight: dict[Site, int] = field(default_factory=dict)

    @property
    def sample_hz(self) -> int:
        return int(self.doc.get("sample_hz") or 0)

    @property
    def total_samples(self) -> int:
        return sum(t.samples for t in self.threads.values())

    @property
    def main_tid(self) -> int | None:
        """The process's main thread (tid == pid), else the Python thread with the most samples."""
        pid = self.doc.get("pid")
        if pid in self.threads:
            return int(pid)
        py = [t for t in self.threads.values() if t.python] or list(self.threads.values())
        return max(py, key=lambda t: t.samples).tid if py else None

    @property
    def has_gpu_time(self) -> bool:
        return any(r.gpu_time_ns for r in self.gpu)

    def note_path(self, ctx: Context, weight: int) -> None:
        site = ctx.site
        if site is None or weight <= 0:
            return
        if weight > self._path_weight.get(site, 0):
            self._path_weight[site] = weight
            self.paths[site] = ctx.call_path()


def _native_name(ctx: Context, node: dict[str, Any], native: str | None) -> str | None:
    """The innermost native frame outside GPU runtime libraries (where work without Python frames is)."""
    if node["kind"] != "native" or ctx.in_api:
        return native
    name = node["name"]
    if _is_runtime_module(node.get("module") or "") or name.startswith("[") or "+0x" in name:
        return native
    return name


def _child_context(ctx: Context, node: dict[str, Any]) -> Context:
    kind = node["kind"]
    name = node["name"]
    changes: dict[str, Any] = {}
    if kind == "thread":
        changes.update(tid=node.get("tid"), thread=name, in_api=False)
    elif kind == "python":
        site = Site(node.get("file"), node.get("line"), name, is_library_frame(node.get("file"), node.get("module")))
        python = ctx.python + (site,)
        changes["python"] = python
        if not site.library:
            changes["user"] = len(python) - 1
        if ctx.loader < 0 and is_data_loader_frame(node.get("file")):
            changes["loader"] = len(python) - 1
        if not ctx.compile and is_compile_frame(kind, name, node.get("file"), site.library):
            changes["compile"] = True
        if not ctx.in_graph and is_graph_call_frame(node.get("file")):
            changes["in_graph"] = True
        if not ctx.in_wrapper and node.get("file") and is_wrapper_file(node["file"]):
            changes["in_wrapper"] = True
    elif kind in ("native", "op"):
        # a probed API's own time, and deepctx's probe at a call (its trap and programs, or the return's
        # trampoline): neither is host work a fix removes
        if kind == "native" and (apis.is_api_entry(name) or name == DEEPCTX_PROBE.name):
            changes["in_api"] = True
            if name == DEEPCTX_PROBE.name:
                changes["in_probe"] = True
            elif ctx.api_entry is None:
                changes["api_entry"] = name
        elif not ctx.in_api:
            # an operator node (aten::mul.Tensor -> mul), or the operator a native frame implements
            node_op = name if is_operator(kind, name) else None
            op = node_op.removeprefix(OPERATOR_PREFIX).split(".", 1)[0] if node_op else \
                operator_of(name) if kind == "native" else None
            if op and op != ctx.op:
                changes["op"] = op
            if node_op and node_op != ctx.operator:
                changes["operator"] = node_op
        if not ctx.compile and is_compile_frame(kind, name):
            changes["compile"] = True
    elif kind == "api":
        changes["api"] = name
        if apis.api_class(name) == apis.COLLECTIVE:
            changes["collective"] = True
    return Context(**{**ctx.__dict__, **changes}) if changes else ctx


_RUNTIME_MODULES = ("libcuda", "libcudart", "libcublas", "libcudnn", "libnccl", "libamdhip64", "libc.so", "libc-",
                    "libpthread", "libstdc++", "ld-linux", "[unknown]", "[unmapped]", "[anon]", "[stack]", "[heap]", "[kernel]",
                    "libpython", "python3")


def _is_runtime_module(module: str) -> bool:
    return module.startswith(_RUNTIME_MODULES)


def build_index(doc: dict[str, Any]) -> ProfileIndex:
    # the cyclic collector's passes over the many small objects made here cost more than the work; none
    # of them form cycles
    was = gc.isenabled()
    gc.disable()
    try:
        return _build(doc)
    finally:
        if was:
            gc.enable()


def _build(doc: dict[str, Any]) -> ProfileIndex:
    idx = ProfileIndex(doc)
    root = doc["root"]
    # the nearest native frame travels beside the context: it changes at most nodes, the context at few
    stack: list[tuple[dict[str, Any], Context, str | None]] = [(c, Context(), None)
                                                                for c in reversed(root.get("children") or [])]
    while stack:
        node, parent_ctx, parent_native = stack.pop()
        ctx = _child_context(parent_ctx, node)
        native = _native_name(parent_ctx, node, parent_native) if node["kind"] == "native" else parent_native
        kind = node["kind"]
        if kind == "thread" and node.get("tid") is not None and node["tid"] not in idx.threads:
            idx.threads[node["tid"]] = ThreadStats(node["tid"], node["name"])
        metrics = node.get("metrics") or {}
        samples = int(metrics.get("cpu_samples", 0))
        if samples:
            _add_samples(idx, ctx, samples)
        if kind in GPU_KINDS or (kind == "api" and any(metrics.get(m) for m in ("calls", "api_time_ns", "gpu_time_ns"))):
            _add_gpu(idx, ctx if ctx.python or native is None else Context(**{**ctx.__dict__, "native": native}),
                     node, metrics)
        for c in reversed(node.get("children") or []):
            stack.append((c, ctx, native))
    return idx


def _add_samples(idx: ProfileIndex, ctx: Context, samples: int) -> None:
    t = idx.threads.get(ctx.tid) if ctx.tid is not None else None
    if t is not None:
        t.samples += samples
        t.python = t.python or bool(ctx.python)
        if ctx.in_api:
            t.api_samples += samples
    site = ctx.site if ctx.python else None
    for group in (idx.samples[(ctx.tid, site)], idx.site_samples[site]):
        group.samples += samples
        if ctx.in_api:
            group.api_samples += samples
            if not ctx.in_probe and ctx.api_entry and apis.api_class(ctx.api_entry) in (apis.LAUNCH, apis.GRAPH):
                group.launch_call_samples += samples
        elif ctx.compile:
            group.compile_samples += samples
        elif ctx.in_graph or ctx.in_wrapper:
            group.graph_samples += samples
            if not ctx.in_wrapper:
                group.graph_call_samples += samples
        if ctx.loader >= 0:
            group.loader_samples += samples
    if ctx.loader >= 0:
        above = ctx.python[:ctx.loader]
        iter_site = next((s for s in reversed(above) if not s.library), None)
        idx.loader_sites[(ctx.tid, iter_site)] += samples
        names = [s.function for s in ctx.python[ctx.loader:]]
        if any("_SingleProcessDataLoaderIter" in n for n in names):
            idx.loader_single[(ctx.tid, iter_site)] += samples
        elif any("_MultiProcessingDataLoaderIter" in n for n in names):
            idx.loader_multi[(ctx.tid, iter_site)] += samples
        inner = [s for s in ctx.python[ctx.loader:] if not s.library]
        if inner:
            idx.loader_user_code[(ctx.tid, inner[-1])] += samples
        if iter_site is not None:
            idx.note_path(Context(python=above, user=above.index(iter_site)), samples)
    if ctx.python:
        idx.note_path(ctx, samples)


def _add_gpu(idx: ProfileIndex, ctx: Context, node: dict[str, Any], m: dict[str, Any]) -> None:
    kind = node["kind"]
    api = ctx.api if kind != "api" else node["name"]
    rec = GpuRecord(kind=kind, name=node["name"], api=api or "", api_class=apis.api_class(api or ""), ctx=ctx,
                    calls=int(m.get("calls", 0)), api_time_ns=int(m.get("api_time_ns", 0)),
                    gpu_time_ns=int(m.get("gpu_time_ns", 0)), bytes=int(m.get("bytes", 0)),
                    sync_wait_ns=int(m.get("sync_wait_ns", 0)),
                    grid=tuple(node["grid"]) if node.get("grid") else None,
                    block=tuple(node["block"]) if node.get("block") else None, stream=node.get("stream"),
                    pcs=kernel_pcs(node) if kind == "kernel" else None, shared_mem=node.get("shared_mem"),
                    compiled_from=node.get("compiled_from"))
    idx.gpu.append(rec)
    t = idx.threads.get(ctx.tid) if ctx.tid is not None else None
    if t is not None:
        t.api_time_ns += rec.api_time_ns
        t.sync_wait_ns += rec.sync_wait_ns
        t.gpu_calls += rec.calls
    idx.note_path(ctx, rec.calls)
