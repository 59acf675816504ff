"""The Profiler gRPC service: validates every request, runs captures, reports state."""

from __future__ import annotations

import itertools
import logging
import math
import os
import platform
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

from deepctx.daemon import access, auth, native_heap
from deepctx.daemon.capture import Capture, CaptureOptions, CaptureResult, Progress
from deepctx.daemon.capture_guard import CredentialGuard
from deepctx.daemon.config import MAX_DUTY_PERIOD_S, MIN_DUTY_ON_S, MIN_DUTY_PERIOD_S, Config
from deepctx.daemon.errors import (
    AlreadyProfiled,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    RequestError,
    ResourceExhausted,
)
from deepctx.daemon.metrics import ProcessTotals, observe_capture
from deepctx.daemon.probe_set import ProbeSet
from deepctx.daemon.processes import list_processes
from deepctx.daemon.profile_wire import to_message
from deepctx.daemon.request_options import RequestOptions
from deepctx.daemon.self_profile import profiled
from deepctx.daemon.service_store import StoreRpcs, open_store
from deepctx.daemon.symbolize import native as symbolize_native
from deepctx.daemon.symbolize.native import SymbolCache
from deepctx.host import file_cache, procfs
from deepctx.host.file_cache import STATUS_PREFIX as HOST_CACHE_PREFIX
from deepctx.host.process_handle import ProcessHandle
from deepctx.host.recent_uses import RecentUses
from deepctx.probes import programs
from deepctx.probes.pc_sampling import PC_DURATION_MAX_MS, PC_PERIOD_MAX, PC_PERIOD_MIN, PcsOptions
from deepctx.profiles.lost import lost_counters
from deepctx.proto.v1 import deepctx_pb2 as pb
from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc

log = logging.getLogger("deepctx.service")

VERSION = "0.1.0"
_PYTHON_MODES = {pb.PYTHON_AUTO: "auto", pb.PYTHON_OFF: "off", pb.PYTHON_ON: "on"}
_GPU_PROBES = {pb.GPU_AUTO: "auto", pb.GPU_OFF: "off", pb.GPU_ON: "on"}
# MODE_DEFAULT: sampled, the design's default (a client that names no mode gets the cheap one)
_CALL_PATH_MODES = {pb.MODE_DEFAULT: "sampled", pb.MODE_EXACT: "exact", pb.MODE_SAMPLED: "sampled"}
_GPU_ACTIVITY = {pb.GPU_ACTIVITY_AUTO: "auto", pb.GPU_ACTIVITY_OFF: "off", pb.GPU_ACTIVITY_ON: "on"}


def _bcc_version() -> str:
    try:
        import bcc

        return str(getattr(bcc, "__version__", "unknown"))
    except Exception:
        return "unavailable"


# A capture reports progress at every turn of its loop: 20 times a second while new Python stacks come in.
# Each event is a message through gRPC, the relay's two threads and the client's stream (CPU on both sides,
# #35.7); a progress bar needs no more than two a second. A new message (a new phase) goes at once.
PROGRESS_INTERVAL_S = 0.5


class ProgressGate:
    """Which of a capture's progress reports are sent: the first of each message, then at most one per
    interval_s while the message stays the same."""

    def __init__(self, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._message: str | None = None
        self._sent = 0.0

    def send(self, message: str, now: float) -> bool:
        if message == self._message and now - self._sent < self.interval_s:
            return False
        self._message, self._sent = message, now
        return True


ATTACH_PCS_OFF = ("attach --pc-sampling is off in this daemon (attach_pc_sampling = false in its config). Start the "
                  "program with `deepctx run --pc-sampling -- CMD`, or set attach_pc_sampling = true")


# The files of the daemon's own process that nearly every GPU job maps too: the Python interpreter and the C and
# C++ runtime libraries (the same files on the host, outside containers). Their unwind tables are built as the
# daemon starts (ProfilerService.prewarm_unwind_tables), not by the first capture: on the development VM they
# were 0.23 of the 0.35 to 0.40 CPU-seconds the continuous daemon spent on its first GPU process (issue #30:
# 0.3 s a new process); from the disk cache a later capture reads all 14 files' tables in 0.02 s.
RUNTIME_FILE = re.compile(r"^(?:python\d|libpython\d|ld-linux|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so"
                          r"|libgcc_s\.so|libstdc\+\+\.so|libz\.so|libexpat\.so|libffi\.so)")


def runtime_files(maps: list[procfs.Mapping]) -> list[tuple[str, str, int]]:
    """(path, dev, inode) of each executable file mapped in maps whose name is an interpreter or runtime
    library's (RUNTIME_FILE), once each."""
    out: dict[str, tuple[str, str, int]] = {}
    for m in maps:
        if m.executable and m.file_backed and RUNTIME_FILE.match(os.path.basename(m.path)):
            out.setdefault(m.path, (m.path, m.dev, m.inode))
    return list(out.values())


def _cache_dir(base: str, name: str) -> str | None:
    """A cache folder under base, or None (no disk cache) when it cannot be made."""
    path = os.path.join(base, name)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        log.warning("no disk cache", extra={"path": path, "error": str(e)})
        return None
    return path


def _sessions_shown(caller: auth.Caller, sessions: list[Capture]) -> list[Capture]:
    """The sessions a caller sees in Status: all for root and the `deepctx` group; for anyone else those of
    processes whose maps the kernel lets it read (their command lines, probes and warnings come from the
    target's memory and maps); the others are only counted."""
    if caller.privileged:
        return sessions
    vis = access.visibility(caller, {s.pid for s in sessions})
    return [s for s in sessions if vis[s.pid].maps]


class ProfilerService(StoreRpcs, pb_grpc.ProfilerServicer):
    def __init__(self, config: Config, shutdown: threading.Event) -> None:
        self.config = config
        self.shutdown = shutdown
        self.started = time.time()
        # one cache of what files say (symbols, unwind tables, interpreter layouts) for every capture
        file_cache.configure(config.host_cache_bytes, config.symbol_cache_files)
        self.symbols = SymbolCache(files=file_cache.shared())
        # the files captures ask symbols of, for the next start's prewarm_symbols
        uses_dir = _cache_dir(config.cache_dir, "symbols")
        self.symbol_uses = RecentUses(Path(uses_dir) if uses_dir is not None else None)
        file_cache.shared().uses = self.symbol_uses
        from deepctx.host.unwind.cache import TableCache

        self.unwind_tables = TableCache(_cache_dir(config.cache_dir, "unwind"), files=file_cache.shared())
        # loaded BPF programs, handed from capture to capture; their code kept on disk for the next daemon
        self.programs = programs.daemon_pool(_cache_dir(config.cache_dir, "programs") if config.cache_programs else None)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified as each session ends (wait_idle)
        self._sessions: dict[int, Capture] = {}
        self._ids = itertools.count(1)
        self.totals: dict[str, int] = {"captures_started": 0, "captures_completed": 0, "captures_failed": 0,
                                       "requests_rejected": 0, "samples": 0, "samples_lost": 0, "events_lost": 0,
                                       "continuous_windows": 0}
        self.store = open_store(config)  # windows of continuous mode; None when store_path is ""
        # prewarm_unwind_placements' figures (Status totals); done at once where it will not run
        runs = config.prewarm_programs and config.native_unwind and config.prewarm_unwind_files > 0
        self.unwind_prewarm = {"unwind_prewarm_done": int(not runs), "unwind_prewarm_files": 0,
                               "unwind_prewarm_rows": 0, "unwind_prewarm_ms": 0, "unwind_prewarm_cpu_ms": 0}
        # prewarm_symbols' figures (Status totals), as those
        runs = config.prewarm_programs and config.prewarm_symbol_files > 0
        self.symbol_prewarm = {"symbol_prewarm_done": int(not runs), "symbol_prewarm_files": 0,
                               "symbol_prewarm_passed": 0, "symbol_prewarm_ms": 0, "symbol_prewarm_cpu_ms": 0}
        self.process_totals = ProcessTotals(full_command=config.metrics_command_lines)  # counters for /metrics

    # --- validation -----------------------------------------------------------------------------

    def _options(self, req: pb.AttachRequest) -> CaptureOptions:
        cfg = self.config
        if req.pid <= 0:
            raise InvalidArgument(f"pid must be a positive process id, not {req.pid}")
        if req.pid == os.getpid():
            raise InvalidArgument("deepctxd does not profile itself")
        if not math.isfinite(req.duration_s) or req.duration_s <= 0:
            raise InvalidArgument(f"duration must be a finite number of seconds above 0, not {req.duration_s:g}")
        if req.duration_s > cfg.max_duration_s:
            raise InvalidArgument(f"duration {req.duration_s:g} s is longer than this daemon allows "
                                  f"({cfg.max_duration_s:g} s, setting max_duration_s)")
        hz = req.sample_hz or cfg.default_sample_hz
        if not 1 <= hz <= cfg.max_sample_hz:
            raise InvalidArgument(f"sampling rate {hz} Hz is out of range: use 1 to {cfg.max_sample_hz} Hz")
        if req.python not in _PYTHON_MODES:
            raise InvalidArgument(f"unknown python mode {req.python}")
        if req.gpu not in _GPU_PROBES:
            raise InvalidArgument(f"unknown gpu probes setting {req.gpu}")
        if req.mode not in _CALL_PATH_MODES:
            raise InvalidArgument(f"unknown call path mode {req.mode}")
        if req.gpu_activity not in _GPU_ACTIVITY:
            raise InvalidArgument(f"unknown gpu activity setting {req.gpu_activity}")
        if req.trace and req.gpu_activity == pb.GPU_ACTIVITY_OFF:
            raise InvalidArgument("a trace needs device activity: drop --no-gpu-activity or --trace")
        if (req.trace or req.gpu_activity == pb.GPU_ACTIVITY_ON) and req.gpu == pb.GPU_OFF:
            raise InvalidArgument("device activity joins the GPU API probes: it cannot run with --no-gpu")
        duty, period = self._duty(req)
        pcs = self._pc_sampling(req)
        if pcs is not None and not cfg.attach_pc_sampling:
            raise FailedPrecondition(ATTACH_PCS_OFF)
        try:
            info = procfs.process_info(req.pid)
        except procfs.ProcessGone:
            raise NotFound(f"process {req.pid} does not exist") from None
        if info.is_kernel_thread:
            raise InvalidArgument(f"process {req.pid} ({info.comm}) is a kernel thread: nothing to profile in user space")
        if not procfs.is_alive(req.pid):
            raise NotFound(f"process {req.pid} has exited")
        return RequestOptions.from_config(
            cfg, duration_s=req.duration_s, sample_hz=hz, kernel_stacks=req.kernel_stacks,
            python=_PYTHON_MODES[req.python], native_python=req.native_python, gpu=_GPU_PROBES[req.gpu],
            gpu_mode=_CALL_PATH_MODES[req.mode], gpu_activity=_GPU_ACTIVITY[req.gpu_activity], trace=req.trace,
            gpu_duty=duty, gpu_duty_period_s=period, pc_sampling=pcs,
        )

    @staticmethod
    def _pc_sampling(req: pb.AttachRequest) -> PcsOptions | None:
        """The request's PC-sampling options, checked (None: none asked; the target's environment decides)."""
        if not req.HasField("pc_sampling"):
            return None
        pc = req.pc_sampling
        if req.gpu_activity != pb.GPU_ACTIVITY_ON and not req.trace:
            raise InvalidArgument("PC sampling needs device activity (--gpu-activity): the samples come from the "
                                  "CUPTI agent")
        try:
            re.compile(pc.kernel)
        except re.error as e:
            raise InvalidArgument(f"kernel filter {pc.kernel!r} is not a regular expression ({e})") from None
        if pc.period and not PC_PERIOD_MIN <= pc.period <= PC_PERIOD_MAX:
            raise InvalidArgument(f"PC sampling period {pc.period} is out of range: use {PC_PERIOD_MIN} to "
                                  f"{PC_PERIOD_MAX} (2^N cycles)")
        if pc.duration_ms > PC_DURATION_MAX_MS:
            raise InvalidArgument(f"PC sampling duration {pc.duration_ms} ms is out of range: at most "
                                  f"{PC_DURATION_MAX_MS} ms")
        return PcsOptions(pc.kernel or None, pc.period, pc.duration_ms)

    def _duty(self, req: pb.AttachRequest) -> tuple[float, float]:
        """The request's GPU duty cycle, checked: (share, period); (1.0, 0.0) for none."""
        if not math.isfinite(req.gpu_duty) or not 0 <= req.gpu_duty <= 1:
            raise InvalidArgument(f"GPU duty must be a share within (0, 1], not {req.gpu_duty:g}")
        if req.gpu_duty in (0, 1):
            if req.gpu_duty_period_s:
                raise InvalidArgument("a GPU duty period needs a GPU duty share below 1 (--gpu-duty)")
            return 1.0, 0.0
        if req.trace:
            raise InvalidArgument("a trace records every call and kernel: it cannot run with a GPU duty share "
                                  "(drop --gpu-duty or --trace)")
        if req.gpu == pb.GPU_OFF:
            raise InvalidArgument("a GPU duty share switches the GPU probes: it cannot run with --no-gpu")
        period = req.gpu_duty_period_s or self.config.gpu_duty_period_s
        if not math.isfinite(period) or not MIN_DUTY_PERIOD_S <= period <= MAX_DUTY_PERIOD_S:
            raise InvalidArgument(f"GPU duty period {period:g} s is out of range: use {MIN_DUTY_PERIOD_S:g} "
                                  f"to {MAX_DUTY_PERIOD_S:g} s")
        if req.gpu_duty * period < MIN_DUTY_ON_S:
            raise InvalidArgument(f"a GPU duty share of {req.gpu_duty:g} of {period:g} s keeps the GPU probes on "
                                  f"{req.gpu_duty * period:.3g} s a period; switching them takes about 0.1 s: "
                                  f"ask for at least {MIN_DUTY_ON_S:g} s (a larger share or period)")
        return req.gpu_duty, period

    def quota_refusal(self, uid: int, continuous: bool) -> str | None:
        """Why one more capture for uid may not start now (None: it may). Root's interactive captures are
        always served, beyond max_sessions, so that no user (nor continuous mode) locks root out; every
        other capture counts against max_sessions, and against max_sessions_per_user for its uid (the
        caller's, or the owner's of a continuously profiled process), interactive and continuous alike."""
        with self._lock:
            return self._quota_refusal(uid, continuous)

    def _quota_refusal(self, uid: int, continuous: bool) -> str | None:
        if uid == 0 and not continuous:
            return None
        if len(self._sessions) >= self.config.max_sessions:
            return (f"{len(self._sessions)} captures are running, the most this daemon runs at once "
                    f"(setting max_sessions)")
        mine = sum(1 for s in self._sessions.values() if s.uid == uid)
        if uid != 0 and mine >= self.config.max_sessions_per_user:
            return (f"uid {uid} already has {mine} captures running, the most one user may have at once "
                    f"(setting max_sessions_per_user)")
        return None

    def _register(self, pid: int, opts: CaptureOptions,
                  on_window: Callable[[CaptureResult, float, float], None] | None = None, *,
                  uid: int = 0, handle: ProcessHandle | None = None, guard: CredentialGuard | None = None) -> Capture:
        with self._lock:
            for s in self._sessions.values():
                # a continuous capture does not keep a user's attach away (each has its own program)
                if s.pid == pid and s.continuous == (on_window is not None):
                    left = max(0.0, s.started_unix + s.opts.duration_s - time.time())
                    raise AlreadyProfiled(f"process {pid} is already being profiled (session {s.id}, "
                                          f"about {left:.0f} s left); wait for it to finish or cancel it")
            why = self._quota_refusal(uid, on_window is not None)
            if why:
                raise ResourceExhausted(why)
            cap = Capture(next(self._ids), pid, opts, self.symbols, self.shutdown, self.unwind_tables, on_window,
                          handle=handle, guard=guard, uid=uid, programs_pool=self.programs)
            self._sessions[cap.id] = cap
            self.totals["captures_started"] += 1
            return cap

    def run_continuous(self, pid: int, opts: CaptureOptions,
                       on_window: Callable[[CaptureResult, float, float], None], *, uid: int,
                       handle: ProcessHandle | None = None) -> None:
        """Continuous mode: profiles pid in windows until it exits or the daemon stops (in the caller's
        thread); every window, the last included, goes to on_window. uid: the process's owner, whose quota
        it counts against. Raises RequestError (logged by the caller, once) when it is refused or cannot
        start; handle is closed either way."""
        try:
            cap = self._register(pid, opts, on_window, uid=uid, handle=handle)
        except BaseException:
            if handle is not None:
                handle.close()
            raise
        try:
            result = cap.run(lambda _p: None, lambda: False)
            on_window(result, result.started_unix, result.started_unix + result.duration_s)
            self.totals["captures_completed"] += 1
        except RequestError:
            raise
        except Exception:
            self.totals["captures_failed"] += 1
            log.exception("continuous capture failed", extra={"pid": pid})
        finally:
            self._end_session(cap)
            native_heap.release()

    # --- RPCs ---------------------------------------------------------------------------------------

    def Attach(self, request: pb.AttachRequest, context: grpc.ServicerContext) -> Iterator[pb.AttachEvent]:
        granted: auth.Grant | None = None
        try:
            # bound first (pidfd), then checked: see auth.grant; the capture closes the handle
            granted = auth.grant(context, request.pid)
            opts = self._options(request)
            cap = self._register(request.pid, opts, uid=granted.caller.uid, handle=granted.handle,
                                 guard=granted.guard)
        except RequestError as e:
            if granted is not None:
                granted.handle.close()
            self.totals["requests_rejected"] += 1
            log.info("attach rejected", extra={"pid": request.pid, "reason": e.message})
            context.abort(e.code, e.message)
        log.info("capture started", extra={"session": cap.id, "pid": cap.pid, "duration_s": opts.duration_s,
                                           "sample_hz": opts.sample_hz})
        events: queue.Queue[Any] = queue.Queue()
        cancelled = threading.Event()
        context.add_callback(cancelled.set)
        cap.delivered.clear()  # the probes are detached once the profile is sent (or the request ends)
        finished: pb.Profile | None = None
        gate = ProgressGate()

        def report(p: Progress) -> None:
            if gate.send(p.message, time.monotonic()):  # here: the request's thread is woken only to send
                events.put(p)

        def work() -> None:
            try:
                result = cap.run(report, cancelled.is_set)
                events.put(result)
            except BaseException as e:  # handed to the request thread, which reports it
                events.put(e)

        worker = threading.Thread(target=work, name=f"capture-{cap.id}", daemon=True)
        worker.start()
        try:
            while True:
                item = events.get()
                if isinstance(item, Progress):
                    yield pb.AttachEvent(progress=pb.Progress(elapsed_s=item.elapsed_s, duration_s=item.duration_s,
                                                              samples=item.samples, message=item.message))
                    continue
                if isinstance(item, BaseException):
                    raise item
                stats = item.stats
                self.totals["samples"] += stats.get("cpu_samples", 0)
                self.totals["samples_lost"] += stats.get("cpu_user_stacks_lost", 0) + stats.get(
                    "cpu_samples_dropped_map_full", 0)
                self.totals["events_lost"] += sum(lost_counters(stats).values())
                self.totals["captures_completed"] += 1
                t_msg = time.monotonic()
                with profiled("message"):
                    msg = to_message(item)
                log.info("capture finished", extra={"session": cap.id, "pid": cap.pid, "ended": item.ended,
                                                    "samples": stats.get("cpu_samples", 0),
                                                    "message_s": round(time.monotonic() - t_msg, 3)})
                finished = msg  # its metrics are taken after the send (a walk over every node)
                yield pb.AttachEvent(profile=msg)
                return
        except RequestError as e:
            self.totals["captures_failed"] += 1
            log.info("capture failed", extra={"session": cap.id, "pid": cap.pid, "reason": e.message})
            context.abort(e.code, e.message)
        except Exception as e:
            self.totals["captures_failed"] += 1
            log.exception("capture crashed", extra={"session": cap.id, "pid": cap.pid})
            context.abort(grpc.StatusCode.INTERNAL, f"capture of process {cap.pid} failed: {type(e).__name__}: {e}")
        finally:
            cap.delivered.set()
            cancelled.set()
            worker.join()
            self._end_session(cap)
            if finished is not None:  # the client has it (or left once it came: the CLI does not wait for the end)
                observe_capture(self.process_totals, finished)
            native_heap.release()

    def _end_session(self, cap: Capture) -> None:
        with self._lock:
            self._sessions.pop(cap.id, None)
            self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Waits until no capture runs (each has sent its profile, or stored its last window); False when some
        still ran after timeout_s."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._sessions, timeout_s)

    def prewarm_programs(self) -> None:
        """Compiles and loads the programs most captures take, before the first capture asks (in a thread of
        its own: the compiles and the verifier run in C, without the GIL). A capture that starts meanwhile
        waits for its program rather than compiling it a second time."""
        cfg = self.config
        opts = CaptureOptions.from_config(cfg, duration_s=1.0, sample_hz=cfg.default_sample_hz)
        sets = ProbeSet.common_programs(opts, self.symbols, self.unwind_tables)
        if cfg.continuous:  # continuous captures cut windows: their count maps differ
            wopts = CaptureOptions.from_config(cfg, duration_s=1.0, sample_hz=cfg.continuous_sample_hz,
                                               window_s=cfg.continuous_window_s)
            # its GPU processes' (most of them PyTorch's or JAX's, which map cuBLAS), with a GEMM library's
            # continuation and without: each newly found process then only attaches
            gpu_sets = [f for f in ProbeSet.common_programs(wopts, self.symbols, self.unwind_tables, continued=True)
                        if any(x.name == "gpu" for x in f)]
            sets = gpu_sets + sets
        for families in sets:
            if self.shutdown.is_set():
                return
            self.programs.prewarm(families)
        native_heap.release()  # the compiles' transient memory

    def prewarm_unwind_tables(self) -> int:
        """Builds (or reads from the disk cache) the unwind tables of the interpreter and runtime libraries this
        daemon maps (runtime_files), as it starts: the first capture of a Python process of the same files then
        finds them in the per-file cache. Returns the files whose table is ready."""
        if not self.config.native_unwind:
            return 0
        t0, c0 = time.monotonic(), time.process_time()
        try:
            files = runtime_files(procfs.read_maps(os.getpid()))
        except procfs.ProcessGone:
            return 0
        got = self.unwind_tables.get_many(files)
        ready = sum(1 for g in got if isinstance(g, tuple))
        # daemon_cpu_s: the whole daemon's CPU over those seconds (the builds run in a pool of threads)
        log.info("unwind tables prewarmed", extra={"files": ready, "of": len(files), "seconds": round(
            time.monotonic() - t0, 3), "daemon_cpu_s": round(time.process_time() - c0, 3)})
        return ready

    def prewarm_unwind_placements(self, arrays: threading.Event | None = None) -> int:
        """Places the rows of the files most recently used on this host (prewarm_unwind_files of them, recorded by
        the unwind cache: host/unwind/recent.py) in the daemon's shared arrays, their tables read from the disk
        cache, as the daemon starts (in the background): a restarted daemon's first process of those files then
        takes stand-ins and reads no table (NativeUnwinder.place_ahead). arrays: set once the shared arrays'
        module is compiled (or none is needed). Returns the files placed; Status totals unwind_prewarm_* say
        what it did, and unwind_prewarm_done that it ended (a capture that starts meanwhile stays correct,
        only slower: place_ahead)."""
        from deepctx.host.unwind.recent import choose

        t0, c0 = time.monotonic(), time.thread_time()  # this thread's CPU: the programs compile beside it
        try:
            if self.unwind_prewarm["unwind_prewarm_done"] or self.shutdown.is_set():
                return 0
            unwinder = ProbeSet.unwinder(self.unwind_tables)  # as the programs' own: the same arrays
            d = unwinder.defines()
            room = int(d["NATIVE_MAX_ROWS"]) - unwinder.config.rows_headroom
            chosen = choose(self.unwind_tables.recent.records(), self.config.prewarm_unwind_files, room)
            if not chosen:  # a new host: no arrays made here for nothing
                return 0
            unwinder.before_compile()  # the arrays' module, before the programs that declare them extern
            if arrays is not None:
                arrays.set()
            got = unwinder.place_ahead(chosen, self.shutdown.is_set)
            self.unwind_prewarm.update(unwind_prewarm_files=got["files"], unwind_prewarm_rows=got["rows"])
            log.info("unwind rows prewarmed", extra={**got, "of": len(chosen), "seconds": round(
                time.monotonic() - t0, 3), "cpu_s": round(time.thread_time() - c0, 3)})
            native_heap.release()  # the tables read
            return got["files"]
        finally:
            if arrays is not None:
                arrays.set()
            self.unwind_prewarm.update(unwind_prewarm_ms=round(1000 * (time.monotonic() - t0)),
                                       unwind_prewarm_cpu_ms=round(1000 * (time.thread_time() - c0)),
                                       unwind_prewarm_done=1)

    def prewarm_symbols(self) -> int:
        """Builds the symbol tables and interpreter layouts of the files captures most recently asked for on this
        host (prewarm_symbol_files of them, host/recent_uses.py) into the per-file cache, as the daemon starts
        (in the background, after the unwind rows: those tables are placed by then, and the ones evicted for
        these are not needed again): a restarted daemon's first process of those files then builds none. Each
        recorded path is opened and taken only as a regular file of the recorded identity, computed now.
        Stops once what it built takes half the host cache's budget (room left for what captures build).
        Returns the files built; Status totals symbol_prewarm_* say what it did."""
        from deepctx.host.python import discovery
        from deepctx.host.recent_uses import choose, opened

        t0, c0 = time.monotonic(), time.thread_time()
        files = self.symbols.files
        built = passed = 0
        try:
            if self.symbol_prewarm["symbol_prewarm_done"]:
                return 0
            chosen = choose(self.symbol_uses.records(), self.config.prewarm_symbol_files,
                            (symbolize_native.KIND, discovery.KIND))
            room, start = files.budget_bytes // 2, files.bytes
            for rec in chosen:
                if self.shutdown.is_set() or files.bytes - start > room:
                    break
                try:
                    with opened(rec, files.identify) as path:
                        if path is None:
                            passed += 1
                        elif rec.kind == symbolize_native.KIND:
                            built += self.symbols.build_ahead(path, rec.identity)
                        else:
                            built += discovery.build_ahead(files, path, rec.identity, rec.path)
                except OSError:  # gone meanwhile: a capture reads what it needs
                    passed += 1
            if chosen:
                log.info("symbol tables prewarmed", extra={"files": built, "of": len(chosen), "passed": passed,
                                                           "seconds": round(time.monotonic() - t0, 3),
                                                           "cpu_s": round(time.thread_time() - c0, 3)})
            return built
        finally:
            self.symbol_prewarm.update(symbol_prewarm_files=built, symbol_prewarm_passed=passed,
                                       symbol_prewarm_ms=round(1000 * (time.monotonic() - t0)),
                                       symbol_prewarm_cpu_ms=round(1000 * (time.thread_time() - c0)),
                                       symbol_prewarm_done=1)

    def close(self) -> None:
        """At the daemon's stop: the last uses of unwind and symbol tables go to disk (the next daemon's
        prewarm)."""
        self.unwind_tables.recent.save(force=True)
        self.symbol_uses.save(force=True)

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.StatusReply:
        cfg = self.config
        reply = pb.StatusReply(
            version=VERSION, daemon_pid=os.getpid(), uptime_s=time.time() - self.started,
            kernel=platform.release(), bcc_version=_bcc_version(), socket=cfg.socket,
            max_duration_s=cfg.max_duration_s, default_sample_hz=cfg.default_sample_hz,
            max_sample_hz=cfg.max_sample_hz,
        )
        reply.totals.update(self.totals)
        reply.totals["symbol_files_loaded"] = self.symbols.loads
        reply.totals.update(self.programs.totals())  # bpf_programs_compiled stays put when a capture reuses one
        reply.totals.update(programs.map_memory())  # kernel memory outside the RSS: the unwind rows first
        # the host cache: what files say (symbol and unwind tables), held under host_cache_bytes, its budget
        reply.totals.update({f"{HOST_CACHE_PREFIX}{k}": v for k, v in file_cache.stats().items()})
        # tables built, read from disk (disk_hits) and found in memory since the start; the start's prewarm
        reply.totals.update({f"unwind_tables_{k}": v for k, v in self.unwind_tables.counters.items()})
        reply.totals.update(self.unwind_prewarm)
        reply.totals.update(self.symbol_prewarm)
        if self.store is not None:
            reply.totals.update(self.store.stats().counters)
        with self._lock:
            sessions = list(self._sessions.values())
        try:
            shown = _sessions_shown(auth.caller_of(context), sessions)
        except RequestError as e:
            context.abort(e.code, e.message)
        except access.AccessCheckFailed as e:
            context.abort(grpc.StatusCode.INTERNAL, f"could not check what the caller may see: {e}")
        if len(shown) < len(sessions):
            reply.totals["sessions_of_others"] = len(sessions) - len(shown)
        for s in shown:
            entry = reply.sessions.add(id=s.id, pid=s.pid, command=s.command, started_unix=s.started_unix,
                                       duration_s=s.opts.duration_s, sample_hz=s.opts.sample_hz,
                                       probes=s.probe_names, state=s.state, warnings=s.warnings)
            entry.stats.update(s.live_stats())
        return reply

    def Stop(self, request: pb.StopRequest, context: grpc.ServicerContext) -> pb.StopReply:
        if request.pid <= 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"pid must be a positive process id, not {request.pid}")
        try:
            caller = auth.authorize(context, request.pid)
        except RequestError as e:
            context.abort(e.code, e.message)
        with self._lock:
            # outside root and `deepctx`, a caller stops its own captures only (not root's of its process)
            caps = [s for s in self._sessions.values() if s.pid == request.pid
                    and (caller.privileged or (s.uid == caller.uid and not s.continuous))]
        if not caps:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no capture of process {request.pid} is running")
        for cap in caps:
            cap.request_stop()
        log.info("captures stopped", extra={"pid": request.pid, "count": len(caps)})
        return pb.StopReply(stopped=len(caps))

    def active_captures(self) -> int:
        with self._lock:
            return len(self._sessions)

    def ListProcesses(self, request: pb.ListProcessesRequest, context: grpc.ServicerContext) -> pb.ListProcessesReply:
        with self._lock:
            profiled = {s.pid for s in self._sessions.values()}
        reply = pb.ListProcessesReply()
        try:
            caller = auth.caller_of(context)
            found = list_processes(include_all=request.all, caller=None if caller.privileged else caller)
        except RequestError as e:
            context.abort(e.code, e.message)
        except access.AccessCheckFailed as e:
            context.abort(grpc.StatusCode.INTERNAL, f"could not check what the caller may see: {e}")
        for p in found:
            reply.processes.add(pid=p.pid, user=p.user, command=p.command, python_version=p.python_version,
                                gpu_libraries=p.gpu_libraries, profiled=p.pid in profiled)
        return reply
