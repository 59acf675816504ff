"""The window store's RPCs (Top, QueryProfile), mixed into ProfilerService, and the store's creation.

ProfilerService sets `self.store` (open_store) and `self.config`; callers outside root and the `deepctx`
group see only windows of their own processes."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import grpc

from deepctx.daemon.auth import caller_of, visible_uid
from deepctx.daemon.config import Config
from deepctx.daemon.errors import FailedPrecondition, InvalidArgument, RequestError
from deepctx.daemon.store import StoreLimits, WindowStore
from deepctx.daemon.store.sqlite import StoreError, TopResult
from deepctx.daemon.store.wire import to_message
from deepctx.profiles.metrics import METRICS
from deepctx.proto.v1 import deepctx_pb2 as pb

log = logging.getLogger("deepctx.service")

MAX_TOP_ROWS = 1000
MAX_FILTER_CHARS = 4096


def open_store(config: Config) -> WindowStore | None:
    """The daemon's window store, evicting on its own timer, or None when store_path is "" or the file
    cannot be used (logged: deepctxd still serves attach)."""
    if not config.store_path:
        return None
    try:
        store = WindowStore(config.store_path, StoreLimits(max_bytes=config.store_max_mb * 1024 * 1024,
                                                           max_age_s=config.store_max_age_s))
    except StoreError as e:
        log.error("window store unavailable", extra={"path": config.store_path, "error": str(e)})
        return None
    # The limits hold when no window comes (GPU processes gone, daemon idle): windows past their age go
    # now and on the store's timer; store.close() (at shutdown) stops it.
    store.start_evicting()
    return store


def _range(since: float, until: float) -> tuple[float, float]:
    now = time.time()
    if not math.isfinite(since) or since < 0:
        raise InvalidArgument(f"since must be a Unix time, not {since:g}")
    if not math.isfinite(until) or until < 0:
        raise InvalidArgument(f"until must be a Unix time or 0 (now), not {until:g}")
    until = until or now
    if until <= since:
        raise InvalidArgument(f"the range is empty: until ({until:.0f}) is not after since ({since:.0f})")
    return since, until


def _filter(value: str, what: str) -> str | None:
    if len(value) > MAX_FILTER_CHARS:
        raise InvalidArgument(f"{what} filter is longer than {MAX_FILTER_CHARS} characters")
    return value or None


def top_reply(r: TopResult) -> pb.TopReply:
    reply = pb.TopReply(since_unix=r.since_unix, until_unix=r.until_unix, windows=r.windows, sort=r.sort,
                        kernel_sort=r.kernel_sort)
    for p in r.processes:
        e = reply.processes.add(host=p.host, pid=p.pid, command=p.command, container=p.container, windows=p.windows)
        e.metrics.update(p.metrics)
    for k in r.kernels:
        reply.kernels.add(name=k.name, processes=k.processes).metrics.update(k.metrics)
    for ln in r.lines:
        reply.lines.add(file=ln.file, line=ln.line, function=ln.function).metrics.update(ln.metrics)
    return reply


class StoreRpcs:
    """Top and QueryProfile; the class that mixes this in provides `store` and `config`."""

    store: WindowStore | None
    config: Config

    def _store(self) -> WindowStore:
        if self.store is None:
            raise FailedPrecondition("this deepctxd keeps no windows (setting store_path, see docs/fleet.md)")
        return self.store

    def Top(self, request: pb.TopRequest, context: grpc.ServicerContext) -> pb.TopReply:
        try:
            caller = caller_of(context)
            since, until = _range(request.since_unix, request.until_unix)
            n = request.n or 10
            if n > MAX_TOP_ROWS:
                raise InvalidArgument(f"n must be at most {MAX_TOP_ROWS}, not {n}")
            if request.sort and request.sort not in METRICS:
                raise InvalidArgument(f"unknown metric {request.sort!r} (known: {', '.join(METRICS)})")
            result = self._store().top(since, n, until, uid=visible_uid(caller), sort=request.sort or None)
        except RequestError as e:
            context.abort(e.code, e.message)
        return top_reply(result)

    def QueryProfile(self, request: pb.QueryProfileRequest, context: grpc.ServicerContext) -> pb.QueryProfileReply:
        try:
            caller = caller_of(context)
            since, until = _range(request.since_unix, request.until_unix)
            kw: dict[str, Any] = {"command": _filter(request.command, "command"),
                                  "container": _filter(request.container, "container")}
            if request.HasField("pid"):
                kw["pid"] = request.pid
            doc = self._store().query(since, until, uid=visible_uid(caller), **kw)
        except RequestError as e:
            context.abort(e.code, e.message)
        if doc is None:
            return pb.QueryProfileReply(windows=0)
        return pb.QueryProfileReply(profile=to_message(doc), windows=int(doc["stats"].get("windows", 0)))
