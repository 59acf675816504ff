"""GPU API nodes by what they do, from their names (the symbols deepctx probes, host/gpu_apis.py, and the
names CUPTI gives calls the probes do not cover)."""

from __future__ import annotations

import re
from functools import lru_cache

from deepctx.host import gpu_apis

LAUNCH, GRAPH, MEMCPY, MEMSET, ALLOC, FREE, SYNC, COLLECTIVE, OTHER = (
    "launch", "graph", "memcpy", "memset", "alloc", "free", "sync", "collective", "other")
_CLASS = {gpu_apis.LAUNCH: LAUNCH, gpu_apis.GRAPH: GRAPH, gpu_apis.MEMCPY: MEMCPY, gpu_apis.MEMSET: MEMSET,
          gpu_apis.ALLOC: ALLOC, gpu_apis.FREE: FREE, gpu_apis.SYNC: SYNC, gpu_apis.COLLECTIVE: COLLECTIVE}
_BY_SYMBOL = {a.symbol: _CLASS.get(a.cls, OTHER) for a in gpu_apis.APIS}
_SYNC_COPY = frozenset(a.symbol for a in gpu_apis.APIS if a.cls == gpu_apis.MEMCPY and "Async" not in a.symbol)
_VERSION = re.compile(r"_(v\d+|ptsz|ptds|spt)$")
# CUPTI's names for calls the probes do not track (daemon/device_tree.py), by what they do.
_FALLBACK = ((re.compile(r"^(cu|cuda|hip)(Launch|GraphLaunch)"), LAUNCH),
             (re.compile(r"^(cu|cuda|hip)Memcpy"), MEMCPY), (re.compile(r"^(cu|cuda|hip)Memset"), MEMSET),
             (re.compile(r"^(cu|cuda|hip)(Mem)?(Malloc|Alloc|HostAlloc)"), ALLOC),
             (re.compile(r"^(cu|cuda|hip)(Mem)?Free"), FREE),
             (re.compile(r"Synchronize"), SYNC), (re.compile(r"^(nccl|rccl)"), COLLECTIVE))


@lru_cache(maxsize=4096)
def api_class(name: str) -> str:
    base = _VERSION.sub("", name)
    for n in (name, base):
        if n in _BY_SYMBOL:
            return _BY_SYMBOL[n]
    for pattern, cls in _FALLBACK:
        if pattern.search(base):
            return cls
    return OTHER


def is_synchronous_copy(api_name: str) -> bool:
    """cudaMemcpy, cuMemcpyHtoD_v2 & co: the host waits until the copy is done."""
    return api_name in _SYNC_COPY or _VERSION.sub("", api_name) in _SYNC_COPY


@lru_cache(maxsize=65536)
def is_api_entry(native_name: str) -> bool:
    """A native frame that is a probed GPU API's entry point: CPU samples below it are time inside the
    call, which the call's api_time_ns already counts."""
    return native_name in _BY_SYMBOL or _VERSION.sub("", native_name) in _BY_SYMBOL
