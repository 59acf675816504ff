"""GPU time into the calling context tree, from buckets as BPF leaves them (no BPF, no root needed)."""

from __future__ import annotations

from typing import Any

from deepctx.daemon.device_tree import (
    UNKNOWN_ORIGIN,
    UNPROBED_API,
    DeviceView,
    add_device_buckets,
    coalesced,
    cupti_kernel_names,
    device_warnings,
)
from deepctx.daemon.gpu_tree import NOT_SAMPLED, KernelNamer
from deepctx.daemon.trace import build_trace, totals_by_kernel
from deepctx.daemon.tree import CallTree
from deepctx.host import gpu_apis
from deepctx.host.frames import Frame
from deepctx.probes.device_activity import (
    DEV_API_UNPROBED,
    DEV_EV_API,
    DEV_EV_RECORD,
    DEV_KEY_F_GRAPH,
    DEV_KEY_F_SAMPLED,
    DEV_KEY_F_UNKNOWN,
    DEV_KIND_KERNEL,
    DEV_KIND_MEMCPY,
    DEV_KIND_SYNC,
    DeviceBucket,
    DevKey,
    DevVal,
    TraceEvent,
)
from deepctx.probes.gpu_api import GPU_KEY_F_SAMPLED, GPU_KEY_F_STACK_LOST

LAUNCH = next(i for i, a in enumerate(gpu_apis.APIS) if a.symbol == "cudaLaunchKernel")
GRAPH = next(i for i, a in enumerate(gpu_apis.APIS) if a.symbol == "cudaGraphLaunch")
MEMCPY = next(i for i, a in enumerate(gpu_apis.APIS) if a.symbol == "cudaMemcpy")
NAMES = {0x1000: "_Z4gemmPf", 0x2000: "_Z4reluPf", 0x3000: "cudaFuncSetAttribute", 0x4000: "cudaLaunchKernel"}
LINE = {11: Frame("python", "step", file="train.py", line=11), 12: Frame("python", "step", file="train.py", line=12)}


class Resolver:
    """Stack id n -> one Python frame at line n (what CallPathResolver gives, shortened)."""

    def thread(self, tid: int) -> Frame:
        return Frame("thread", "main", tid=tid)

    def path(self, tid: int, user_stack: int, py_stack: int, lost: bool = False) -> list[Frame]:
        return [self.thread(tid), LINE[py_stack]]

    def stack_key(self, user_stack: int, py_stack: int, lost: bool) -> tuple[int, int]:
        return user_stack, py_stack


class Namer(KernelNamer):
    def __init__(self, names: dict[tuple[int, int], str]) -> None:
        self.handle_names = names
        self._cache: dict = {}

    def _name(self, api: gpu_apis.Api, obj: int) -> str:
        return self.handle_names.get((1, obj), "[unnamed kernel]")


def bucket(api_id: int = LAUNCH, py: int = 11, name: int = 0x1000, kind: int = DEV_KIND_KERNEL, count: int = 1,
           time_ns: int = 100, flags: int = 0, call_flags: int = GPU_KEY_F_SAMPLED, obj: int = 0xAB,
           **kw: Any) -> DeviceBucket:
    base = dict(pid=1, tid=1, user_stack=py, py_stack=py, api_id=api_id, obj=obj, stream=0, grid=(1, 1, 1),
                block=(32, 1, 1), shared_mem=0, api_kind=1, call_flags=call_flags, name=name, fn_name=0, device=0,
                kind=kind, copy_kind=0, flags=flags, count=count, time_ns=time_ns, bytes=0)
    base.update(kw)
    return DeviceBucket(**base)  # type: ignore[arg-type]


def build(buckets: list[DeviceBucket]) -> tuple[CallTree, dict[str, int]]:
    tree = CallTree("t")
    namer = Namer(cupti_kernel_names(buckets, NAMES))
    stats = add_device_buckets(tree, buckets, Resolver(), namer, lambda api: None, NAMES)  # type: ignore[arg-type]
    return tree, stats


def gpu(tree: CallTree) -> dict[tuple[str, ...], int]:
    return {tuple(f.name for f in p): v for p, v in tree.paths_with("gpu_time_ns")}


def test_kernel_time_lands_on_the_launchs_kernel_node_named_by_cupti() -> None:
    tree, stats = build([bucket(time_ns=700, count=7), bucket(py=12, name=0x2000, obj=0xCD, time_ns=30)])
    launch = [n for n in tree.nodes if n.frame.kind == "kernel"]
    assert {n.frame.name: n.frame.launch for n in launch} == {"gemm(float*)": (1, 1, 1, 32, 1, 1, 0),
                                                              "relu(float*)": (1, 1, 1, 32, 1, 1, 0)}
    assert gpu(tree) == {("main", "step", "cudaLaunchKernel", "gemm(float*)"): 700,
                         ("main", "step", "cudaLaunchKernel", "relu(float*)"): 30}
    assert stats["device_time_in_profile_ns"] == 730


def test_graph_kernels_sit_below_the_graph() -> None:
    tree, _ = build([bucket(api_id=GRAPH, obj=0x77, time_ns=50, flags=DEV_KEY_F_GRAPH),
                     bucket(api_id=GRAPH, obj=0x77, name=0x2000, time_ns=5, flags=DEV_KEY_F_GRAPH)])
    assert gpu(tree) == {("main", "step", "cudaGraphLaunch", "[graph 0x77]", "gemm(float*)"): 50,
                         ("main", "step", "cudaGraphLaunch", "[graph 0x77]", "relu(float*)"): 5}


def test_copies_land_on_the_apis_copy_node_and_syncs_carry_no_gpu_time() -> None:
    tree, stats = build([bucket(api_id=MEMCPY, kind=DEV_KIND_MEMCPY, name=0, copy_kind=1, time_ns=400, bytes=4096),
                         bucket(kind=DEV_KIND_SYNC, name=0, time_ns=10_000)])
    assert gpu(tree) == {("main", "step", "cudaMemcpy", "HtoD"): 400}
    assert stats["device_sync_records"] == 1


def test_unknown_launches_are_kept_apart() -> None:
    tree, stats = build([bucket(flags=DEV_KEY_F_UNKNOWN, tid=0, time_ns=90, count=3)])
    assert gpu(tree) == {(UNKNOWN_ORIGIN.name, "gemm(float*)"): 90}
    assert stats["device_time_unknown_launch_ns"] == 90


def test_calls_outside_the_api_probes_are_named_by_cupti() -> None:
    tree, _ = build([bucket(api_id=DEV_API_UNPROBED, fn_name=0x3000, time_ns=8)])
    assert gpu(tree) == {("main", "step", "cudaFuncSetAttribute", "gemm(float*)"): 8}


def test_launches_the_agent_reported_count_on_the_apis_node() -> None:
    """A launch no uprobe saw (left to the agent): CUPTI's API name gives the api node, the record its
    kernel, launch shape and count; a sampled capture's records of other kinds or from a graph, charged to
    that launch, are not shown as its launches."""
    tree, stats = build([
        bucket(api_id=DEV_API_UNPROBED, fn_name=0x4000, count=5, time_ns=50, grid=(8, 1, 1), block=(128, 1, 1),
               shared_mem=64),
        bucket(api_id=DEV_API_UNPROBED, fn_name=0x4000, kind=DEV_KIND_MEMCPY, name=0, copy_kind=1, count=2,
               time_ns=20, flags=DEV_KEY_F_SAMPLED),
        bucket(api_id=DEV_API_UNPROBED, fn_name=0x4000, name=0x2000, count=3, time_ns=30,
               flags=DEV_KEY_F_SAMPLED | DEV_KEY_F_GRAPH)])
    kernel = next(n for n in tree.nodes if n.frame.kind == "kernel" and n.frame.name == "gemm(float*)")
    assert kernel.frame.launch == (8, 1, 1, 128, 1, 1, 64)
    assert tree.nodes[kernel.parent].frame.name == "cudaLaunchKernel"
    assert kernel.metrics["calls"] == 5 and kernel.metrics["gpu_time_ns"] == 50
    assert gpu(tree) == {("main", "step", "cudaLaunchKernel", "gemm(float*)"): 50,
                         ("main", "step", UNPROBED_API, "HtoD"): 20,
                         ("main", "step", UNPROBED_API, "relu(float*)"): 30}
    assert stats["device_calls_reported_by_agent"] == 5
    assert tree.total("calls") == 5


def test_a_window_seen_in_part_is_scaled_up() -> None:
    view = DeviceView([bucket(count=3, time_ns=301, bytes=7)], NAMES).scaled(2.5)
    assert [(b.count, b.time_ns, b.bytes) for b in view.buckets] == [(8, 752, 18)]


def test_sampled_time_is_shared_out_over_the_captured_paths_exactly() -> None:
    """Records of calls whose path was not captured go to the captured paths of the same kernel and
    launch shape, in proportion to their record counts; the total stays exact."""
    tree, stats = build([bucket(py=11, count=3, time_ns=300), bucket(py=12, count=1, time_ns=100),
                         bucket(py=11, count=6, time_ns=601, call_flags=0, user_stack=0, py_stack=0)])
    by_line = {p[1].line: v for p, v in tree.paths_with("gpu_time_ns")}
    assert by_line == {11: 751, 12: 250} and sum(by_line.values()) == 1001
    assert stats["device_time_without_call_path_ns"] == 0


def test_no_captured_path_at_all_says_so() -> None:
    tree, stats = build([bucket(count=2, time_ns=20, call_flags=0)])
    assert gpu(tree) == {("main", NOT_SAMPLED.name, "cudaLaunchKernel", "gemm(float*)"): 20}
    assert stats["device_time_without_call_path_ns"] == 20


def test_warnings_name_what_went_missing() -> None:
    assert device_warnings({"device_correlations": 10, "device_records": 10}) == []
    w = device_warnings({"device_correlations": 10, "device_records": 0, "device_agent_status": -3})
    assert "CUPTI is held by another profiler" in w[0] and "handed over no record" in w[1]
    assert device_warnings({"device_agent_awaited": 1}) == [
        "no device activity: the process's environment names a deepctx agent that it has not loaded (it has not "
        "started CUDA/HIP yet, or the agent failed to load)"]
    assert "3 device records had no launch" in device_warnings(
        {"device_records": 5, "device_records_unknown_correlation": 3})[0]
    assert device_warnings({"device_records": 5, "device_shares": 5, "device_shares_lost": 1}) == [
        "1 of 5 recorded shares handed over no device record although the process launched GPU work: the device "
        "times are scaled up from the others"]


def ev(type_: int, start: int, end: int, corr: int, **kw: Any) -> TraceEvent:
    base = dict(type=type_, start_ns=start, end_ns=end, bytes=0, name=0, graph_node=0, user_stack=0, py_stack=0,
                stream_handle=0, pid=1, tid=5, correlation=corr, stream=7, device=0, api_id=LAUNCH,
                kind=DEV_KIND_KERNEL, copy_kind=0, known=True)
    base.update(kw)
    return TraceEvent(**base)  # type: ignore[arg-type]


def test_trace_part_fields_order_and_clock() -> None:
    events = [ev(DEV_EV_RECORD, 150, 250, 9, name=0x1000), ev(DEV_EV_API, 100, 140, 9, name=0),
              ev(DEV_EV_RECORD, 300, 310, 10, kind=DEV_KIND_MEMCPY, copy_kind=2, bytes=64),
              ev(DEV_EV_RECORD, 1, 2, 11, pid=2)]
    trace = build_trace(events, NAMES, offset_ns=1_000_000, pid=1)
    assert trace == [
        {"kind": "api", "name": "cudaLaunchKernel", "tid": 5, "start_ns": 1_000_100, "dur_ns": 40, "correlation": 9},
        {"kind": "kernel", "name": "gemm(float*)", "device": 0, "stream": 7, "start_ns": 1_000_150, "dur_ns": 100,
         "correlation": 9, "bytes": 0, "graph_node": 0, "tid": 5},
        {"kind": "memcpy", "name": "Memcpy DtoH", "device": 0, "stream": 7, "start_ns": 1_000_300, "dur_ns": 10,
         "correlation": 10, "bytes": 64, "graph_node": 0, "tid": 5},
    ]
    assert totals_by_kernel(trace) == {"gemm(float*)": 100}


def entry(pid: int = 1, stacks: tuple[int, int] = (5, 50), flags: int = GPU_KEY_F_SAMPLED, name: int = 0x1000,
          origin: tuple[int, int, int] = (0, 0, 0), count: int = 1, time_ns: int = 100) -> tuple[DevKey, DevVal]:
    k = DevKey()
    k.call.pid, k.call.tid, (k.call.user_stack, k.call.py_stack), k.call.flags = pid, 7, stacks, flags
    k.call.origin_tid, k.call.origin_user_stack, k.call.origin_py_stack = origin
    k.call.api_id, k.name, k.kind = LAUNCH, name, DEV_KIND_KERNEL
    return k, DevVal(count, time_ns, 0, 3)


def test_buckets_whose_stacks_resolve_alike_are_merged_as_they_are_read() -> None:
    """Native ids 5 and 6 (and Python 50, 51) name the same frames, 9 others: entries differing only there
    become one bucket with their sums; other kernels, other stacks, other processes and calls without a
    captured path (whose ids are not looked up) stay apart; an origin's stacks are merged alike."""
    asked: list[tuple[int, int, bool]] = []

    def stack_key(native: int, python: int, lost: bool) -> tuple[int, int]:
        asked.append((native, python, lost))
        return (0 if lost else 5 if native in (5, 6) else native), (50 if python in (50, 51) else python)

    entries = [entry(), entry(stacks=(6, 51), count=2, time_ns=300), entry(stacks=(9, 50)), entry(name=0x2000),
               entry(pid=2), entry(stacks=(8, 51), flags=0, count=4),
               entry(stacks=(6, 50), flags=GPU_KEY_F_SAMPLED | GPU_KEY_F_STACK_LOST),
               entry(stacks=(9, 0), origin=(3, 6, 51)), entry(stacks=(9, 0), origin=(3, 5, 50), count=5)]
    got = {(b.user_stack, b.py_stack, b.call_flags, b.name, b.origin_user_stack, b.origin_py_stack):
           (b.count, b.time_ns, b.api_time_ns) for b in coalesced(entries, 1, stack_key)}
    assert got == {
        (5, 50, GPU_KEY_F_SAMPLED, 0x1000, 0, 0): (3, 400, 6),  # (5, 50) and (6, 51) merged
        (9, 50, GPU_KEY_F_SAMPLED, 0x1000, 0, 0): (1, 100, 3),
        (5, 50, GPU_KEY_F_SAMPLED, 0x2000, 0, 0): (1, 100, 3),
        (8, 51, 0, 0x1000, 0, 0): (4, 100, 3),  # no captured path: its ids kept as they are
        (0, 50, GPU_KEY_F_SAMPLED | GPU_KEY_F_STACK_LOST, 0x1000, 0, 0): (1, 100, 3),  # lost: no native stack
        (9, 0, GPU_KEY_F_SAMPLED, 0x1000, 5, 50): (6, 200, 6),  # origins (6, 51) and (5, 50) merged
    }
    assert (8, 51, False) not in asked and (6, 50, True) in asked
    assert asked.count((6, 51, False)) == 2  # as a caller's stacks, then as an origin's
