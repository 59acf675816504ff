"""The GPU API entry points deepctx probes, and how to read each one's arguments.

Argument positions are x86-64 SysV "eightbyte" slots (gpu_api.h): 0-5 are registers, 6+ are on the
stack; a dim3 passed by value takes two slots. Names are the exported symbols; `_ptsz`/`_ptds`/`_spt`
are the per-thread-default-stream variants, `_v2` the current driver ABI.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepctx.host.gpu_runtimes import LIBRARIES

# enum gpu_api_class
LAUNCH, GRAPH, MEMCPY, MEMSET, ALLOC, FREE, SYNC, COLLECTIVE, GETFUNC, OTHER, FUNC_ALIAS, HANDOFF, NODE_CREATED, \
    NODE_RUN = range(1, 15)
# enum gpu_arg_layout
L_NONE, L_DIM3, L_SCALARS, L_CU_EX, L_RT_EX = range(5)
# enum gpu_copy_kind
H2H, H2D, D2H, D2D, DEFAULT, PEER = range(6)
UNKNOWN_KIND = 255
COPY_NAMES = {H2H: "HtoH", H2D: "HtoD", D2H: "DtoH", D2D: "DtoD", DEFAULT: "default", PEER: "peer",
              UNKNOWN_KIND: "unknown"}



@dataclass(frozen=True)
class Api:
    library: str
    symbol: str
    cls: int
    layout: int = L_NONE
    object_slot: int = -1
    bytes_slot: int = -1
    kind_slot: int = -1
    stream_slot: int = -1
    name_slot: int = -1
    dtype_slot: int = -1
    bytes_mul_slot: int = -1
    bytes_scale: int = 1
    fixed_kind: int = UNKNOWN_KIND
    sync_target: str = ""  # what a SYNC call waits for: device, stream, event, context

    @property
    def display(self) -> str:
        return self.symbol


def _variants(base: Api, suffixes: tuple[str, ...]) -> list[Api]:
    from dataclasses import replace

    return [base] + [replace(base, symbol=base.symbol + s) for s in suffixes]


def _runtime(lib: str, p: str, spt: tuple[str, ...]) -> list[Api]:
    """The CUDA runtime and HIP share their launch/copy/set/alloc signatures (p = "cuda" or "hip")."""
    a: list[Api] = []
    a += _variants(Api(lib, f"{p}LaunchKernel", LAUNCH, L_DIM3), spt)
    a += _variants(Api(lib, f"{p}LaunchCooperativeKernel", LAUNCH, L_DIM3), spt)
    a += _variants(Api(lib, f"{p}GraphLaunch", GRAPH, object_slot=0, stream_slot=1), spt)
    a += _variants(Api(lib, f"{p}Memcpy", MEMCPY, bytes_slot=2, kind_slot=3), spt)
    a += _variants(Api(lib, f"{p}MemcpyAsync", MEMCPY, bytes_slot=2, kind_slot=3, stream_slot=4), spt)
    a += [Api(lib, f"{p}MemcpyPeer", MEMCPY, bytes_slot=4, fixed_kind=PEER),
          Api(lib, f"{p}MemcpyPeerAsync", MEMCPY, bytes_slot=4, stream_slot=5, fixed_kind=PEER)]
    a += _variants(Api(lib, f"{p}Memcpy2D", MEMCPY, bytes_slot=4, bytes_mul_slot=5, kind_slot=6), spt)
    a += _variants(Api(lib, f"{p}Memcpy2DAsync", MEMCPY, bytes_slot=4, bytes_mul_slot=5, kind_slot=6,
                       stream_slot=7), spt)
    a += _variants(Api(lib, f"{p}MemcpyToSymbol", MEMCPY, bytes_slot=2, kind_slot=4), spt)
    a += _variants(Api(lib, f"{p}MemcpyFromSymbol", MEMCPY, bytes_slot=2, kind_slot=4), spt)
    a += _variants(Api(lib, f"{p}MemcpyToSymbolAsync", MEMCPY, bytes_slot=2, kind_slot=4, stream_slot=5), spt)
    a += _variants(Api(lib, f"{p}MemcpyFromSymbolAsync", MEMCPY, bytes_slot=2, kind_slot=4, stream_slot=5), spt)
    a += _variants(Api(lib, f"{p}Memset", MEMSET, bytes_slot=2), spt)
    a += _variants(Api(lib, f"{p}MemsetAsync", MEMSET, bytes_slot=2, stream_slot=3), spt)
    a += _variants(Api(lib, f"{p}Memset2D", MEMSET, bytes_slot=3, bytes_mul_slot=4), spt)
    a += _variants(Api(lib, f"{p}Memset2DAsync", MEMSET, bytes_slot=3, bytes_mul_slot=4, stream_slot=5), spt)
    a += [Api(lib, f"{p}Malloc", ALLOC, bytes_slot=1),
          Api(lib, f"{p}MallocManaged", ALLOC, bytes_slot=1),
          Api(lib, f"{p}MallocHost", ALLOC, bytes_slot=1),
          Api(lib, f"{p}MallocPitch", ALLOC, bytes_slot=2, bytes_mul_slot=3),
          Api(lib, f"{p}MallocAsync", ALLOC, bytes_slot=1, stream_slot=2),
          Api(lib, f"{p}MallocFromPoolAsync", ALLOC, bytes_slot=1, stream_slot=3),
          Api(lib, f"{p}Free", FREE),
          Api(lib, f"{p}FreeHost", FREE),
          Api(lib, f"{p}FreeAsync", FREE, stream_slot=1)]
    a += [Api(lib, f"{p}DeviceSynchronize", SYNC, sync_target="device"),
          Api(lib, f"{p}EventSynchronize", SYNC, object_slot=0, sync_target="event"),
          Api(lib, f"{p}StreamWaitEvent", OTHER, stream_slot=0, object_slot=1)]
    a += _variants(Api(lib, f"{p}StreamSynchronize", SYNC, stream_slot=0, sync_target="stream"), spt)
    return a


def _cuda_runtime() -> list[Api]:
    pt = ("_ptsz",)
    a = _runtime("cudart", "cuda", pt)
    a += _variants(Api("cudart", "cudaLaunchKernelExC", LAUNCH, L_RT_EX), pt)
    a += [Api("cudart", "cudaHostAlloc", ALLOC, bytes_slot=1)]
    # cudaMemcpy and cudaMemset's synchronous forms take _ptds, not _ptsz
    from dataclasses import replace

    out = []
    for api in a:
        if api.symbol.endswith("_ptsz") and api.cls in (MEMCPY, MEMSET) and "Async" not in api.symbol:
            api = replace(api, symbol=api.symbol.replace("_ptsz", "_ptds"))
        out.append(api)
    return out


def _hip() -> list[Api]:
    spt = ("_spt",)
    a = _runtime("hip", "hip", spt)
    a += [
        Api("hip", "hipModuleLaunchKernel", LAUNCH, L_SCALARS),
        # global work sizes (threads) in the grid slots: the tree divides them by the block (gpu_api.py)
        Api("hip", "_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j",
            LAUNCH, L_SCALARS),
        Api("hip", "hipMemcpyHtoD", MEMCPY, bytes_slot=2, fixed_kind=H2D),
        Api("hip", "hipMemcpyDtoH", MEMCPY, bytes_slot=2, fixed_kind=D2H),
        Api("hip", "hipMemcpyDtoD", MEMCPY, bytes_slot=2, fixed_kind=D2D),
        Api("hip", "hipMemcpyHtoDAsync", MEMCPY, bytes_slot=2, stream_slot=3, fixed_kind=H2D),
        Api("hip", "hipMemcpyDtoHAsync", MEMCPY, bytes_slot=2, stream_slot=3, fixed_kind=D2H),
        Api("hip", "hipMemcpyDtoDAsync", MEMCPY, bytes_slot=2, stream_slot=3, fixed_kind=D2D),
        Api("hip", "hipMemcpyWithStream", MEMCPY, bytes_slot=2, kind_slot=3, stream_slot=4),
        Api("hip", "hipMemsetD8", MEMSET, bytes_slot=2),
        Api("hip", "hipMemsetD16", MEMSET, bytes_slot=2, bytes_scale=2),
        Api("hip", "hipMemsetD32", MEMSET, bytes_slot=2, bytes_scale=4),
        Api("hip", "hipMemsetD8Async", MEMSET, bytes_slot=2, stream_slot=3),
        Api("hip", "hipMemsetD16Async", MEMSET, bytes_slot=2, bytes_scale=2, stream_slot=3),
        Api("hip", "hipMemsetD32Async", MEMSET, bytes_slot=2, bytes_scale=4, stream_slot=3),
        Api("hip", "hipHostMalloc", ALLOC, bytes_slot=1),
        Api("hip", "hipExtMallocWithFlags", ALLOC, bytes_slot=1),
        Api("hip", "hipHostFree", FREE),
        Api("hip", "hipCtxSynchronize", SYNC, sync_target="context"),
        Api("hip", "hipModuleGetFunction", GETFUNC, object_slot=0, name_slot=2),
    ]
    return a


def _cuda_driver() -> list[Api]:
    pt = ("_ptsz",)
    a: list[Api] = []
    a += _variants(Api("cuda", "cuLaunchKernel", LAUNCH, L_SCALARS), pt)
    a += _variants(Api("cuda", "cuLaunchCooperativeKernel", LAUNCH, L_SCALARS), pt)
    a += _variants(Api("cuda", "cuLaunchKernelEx", LAUNCH, L_CU_EX), pt)
    a += _variants(Api("cuda", "cuGraphLaunch", GRAPH, object_slot=0, stream_slot=1), pt)
    a += _variants(Api("cuda", "cuMemcpy", MEMCPY, bytes_slot=2, fixed_kind=DEFAULT), ("_ptds",))
    a += _variants(Api("cuda", "cuMemcpyAsync", MEMCPY, bytes_slot=2, stream_slot=3, fixed_kind=DEFAULT), pt)
    for name, kind in (("HtoD", H2D), ("DtoH", D2H), ("DtoD", D2D)):
        a += _variants(Api("cuda", f"cuMemcpy{name}_v2", MEMCPY, bytes_slot=2, fixed_kind=kind), ("_ptds",))
        a += _variants(Api("cuda", f"cuMemcpy{name}Async_v2", MEMCPY, bytes_slot=2, stream_slot=3, fixed_kind=kind),
                       ("_ptsz",))
    a += [Api("cuda", "cuMemcpyPeer", MEMCPY, bytes_slot=4, fixed_kind=PEER),
          Api("cuda", "cuMemcpyPeerAsync", MEMCPY, bytes_slot=4, stream_slot=5, fixed_kind=PEER)]
    for width, scale in (("8", 1), ("16", 2), ("32", 4)):
        a += _variants(Api("cuda", f"cuMemsetD{width}_v2", MEMSET, bytes_slot=2, bytes_scale=scale), ("_ptds",))
        a += _variants(Api("cuda", f"cuMemsetD{width}Async", MEMSET, bytes_slot=2, bytes_scale=scale, stream_slot=3),
                       pt)
    a += [Api("cuda", "cuMemAlloc_v2", ALLOC, bytes_slot=1),
          Api("cuda", "cuMemAllocHost_v2", ALLOC, bytes_slot=1),
          Api("cuda", "cuMemHostAlloc", ALLOC, bytes_slot=1),
          Api("cuda", "cuMemAllocManaged", ALLOC, bytes_slot=1),
          Api("cuda", "cuMemAllocPitch_v2", ALLOC, bytes_slot=2, bytes_mul_slot=3),
          Api("cuda", "cuMemCreate", ALLOC, bytes_slot=1),
          Api("cuda", "cuMemFree_v2", FREE),
          Api("cuda", "cuMemFreeHost", FREE),
          Api("cuda", "cuMemRelease", FREE)]
    a += _variants(Api("cuda", "cuMemAllocAsync", ALLOC, bytes_slot=1, stream_slot=2), pt)
    a += _variants(Api("cuda", "cuMemFreeAsync", FREE, stream_slot=1), pt)
    a += [Api("cuda", "cuCtxSynchronize", SYNC, sync_target="context"),
          Api("cuda", "cuEventSynchronize", SYNC, object_slot=0, sync_target="event")]
    a += _variants(Api("cuda", "cuStreamSynchronize", SYNC, stream_slot=0, sync_target="stream"), pt)
    a += _variants(Api("cuda", "cuStreamWaitEvent", OTHER, stream_slot=0, object_slot=1), pt)
    a += [Api("cuda", "cuModuleGetFunction", GETFUNC, object_slot=0, name_slot=2),
          Api("cuda", "cuLibraryGetKernel", GETFUNC, object_slot=0, name_slot=2),
          Api("cuda", "cuKernelGetFunction", FUNC_ALIAS, object_slot=0, name_slot=1)]
    return a


def _nccl(lib: str) -> list[Api]:
    return [
        Api(lib, "ncclAllReduce", COLLECTIVE, bytes_slot=2, dtype_slot=3, stream_slot=6),
        Api(lib, "ncclAllGather", COLLECTIVE, bytes_slot=2, dtype_slot=3, stream_slot=5),
        Api(lib, "ncclReduceScatter", COLLECTIVE, bytes_slot=2, dtype_slot=3, stream_slot=6),
        Api(lib, "ncclBroadcast", COLLECTIVE, bytes_slot=2, dtype_slot=3, stream_slot=6),
        Api(lib, "ncclReduce", COLLECTIVE, bytes_slot=2, dtype_slot=3, stream_slot=7),
        Api(lib, "ncclSend", COLLECTIVE, bytes_slot=1, dtype_slot=2, stream_slot=5),
        Api(lib, "ncclRecv", COLLECTIVE, bytes_slot=1, dtype_slot=2, stream_slot=5),
        Api(lib, "ncclGroupStart", OTHER),
        Api(lib, "ncclGroupEnd", OTHER),
    ]


def all_apis() -> list[Api]:
    apis = _cuda_runtime() + _cuda_driver() + _hip() + _nccl("nccl") + _nccl("rccl")
    seen: set[tuple[str, str]] = set()
    out = []
    for a in apis:
        if (a.library, a.symbol) not in seen:
            seen.add((a.library, a.symbol))
            out.append(a)
    return out


APIS = all_apis()
BY_LIBRARY: dict[str, list[tuple[int, Api]]] = {}
for _i, _a in enumerate(APIS):
    BY_LIBRARY.setdefault(_a.library, []).append((_i, _a))


def library_kind(basename: str) -> str | None:
    for kind, pattern in LIBRARIES.items():
        if pattern.match(basename):
            return kind
    return None
