"""One capture: take a loaded program for the target's probe families, attach them, sample for a while, build its
profile, give the program back. It drives the families through their lifecycle (probes/family.py) by way of a
ProbeSet (daemon/probe_set.py) and names none of them."""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deepctx.daemon import native_heap
from deepctx.daemon.busy_meter import BusyFits
from deepctx.daemon.capture_guard import CredentialGuard
from deepctx.daemon.device_share import DeviceShares
from deepctx.daemon.device_tree import device_warnings
from deepctx.daemon.duty_cycle import DutyCycle
from deepctx.daemon.errors import NotFound, PermissionDenied
from deepctx.daemon.probe_set import BuildInputs, ProbeSet
from deepctx.daemon.self_profile import profiled
from deepctx.daemon.symbolize.native import NativeSymbolizer, SymbolCache
from deepctx.daemon.trace import clock_offset_ns
from deepctx.daemon.tree import CallTree
from deepctx.host import procfs
from deepctx.host.frames import Frame
from deepctx.host.process_handle import ProcessHandle
from deepctx.host.torch_compile import Compile
from deepctx.probes import program_stats, programs
from deepctx.probes.family import ProbeFamily, Target
from deepctx.probes.program_share import ProgramShare
from deepctx.profiles.metrics import METRICS

log = logging.getLogger("deepctx.capture")

POLL_INTERVAL_S = 0.5
# GPU stacks resolved ahead of the build, at most this long a pass, once a PREWARM_INTERVAL_S (see _prewarm)
PREWARM_INTERVAL_S = 1.0
PREWARM_BUDGET_S = 0.15
RELEASE_WAIT_S = 5.0  # how long a built capture's probes wait for its profile's delivery before detaching
BUSY_POLL_INTERVAL_S = 0.05  # while a family says it is busy (e.g. new Python stacks to name before an exit)


class CredentialsChanged(PermissionDenied):
    """The target changed its credentials (or the caller lost access) during the capture: it ends, and
    returns nothing to the caller."""


@dataclass
class CaptureOptions:
    duration_s: float
    sample_hz: int
    kernel_stacks: bool = False
    python: str = "auto"  # auto | on | off
    native_python: bool = False
    python_max_depth: int = 128
    stack_map_entries: int = 16384
    count_map_entries: int = 65536
    gpu: str = "auto"  # auto | on | off
    gpu_mode: str = "exact"  # exact | sampled
    gpu_sampled_paths_per_s: int = 2000
    gpu_api_time_every: int = 8
    native_unwind: bool = True
    gpu_native_continue: bool = False  # see Config.gpu_native_continue
    window_s: float = 0.0  # continuous mode: cut a profile every window_s seconds (0: one profile at the end)
    gpu_activity: str = "auto"  # auto (the target's CUPTI agent, if any) | on (load one if absent) | off
    trace: bool = False  # per-call and per-record events (needs device activity)
    flush_timeout_s: float = 1.0  # how long the window's end waits for the agent's last records
    handoff_points: tuple = ()  # HandoffPoint, beyond the built-in ones
    autograd_nodes: bool = True  # the built-in forward <-> backward node points (exact mode)
    agent_calls: str = "auto"  # auto | on | off: the CUPTI agent reports launches (see Config.agent_calls)
    # share of each cycle the GPU API probes and the device activity agent are on (the rest of it they are
    # detached and cost nothing; counts and GPU times are scaled up to the capture). A windowed capture's
    # cycle is its window; another's is gpu_duty_period_s
    gpu_duty: float = 1.0
    gpu_duty_period_s: float = 0.0

    @classmethod
    def from_config(cls, cfg: Any, **per_capture: Any) -> CaptureOptions:
        """The daemon-wide settings (a daemon Config), plus what this capture asks for."""
        return cls(python_max_depth=cfg.python_max_depth, stack_map_entries=cfg.stack_map_entries,
                   count_map_entries=cfg.count_map_entries, gpu_sampled_paths_per_s=cfg.gpu_sampled_paths_per_s,
                   gpu_api_time_every=cfg.gpu_api_time_every,
                   native_unwind=cfg.native_unwind, gpu_native_continue=cfg.gpu_native_continue,
                   autograd_nodes=cfg.autograd_nodes,
                   agent_calls=cfg.agent_calls, handoff_points=ProbeSet.handoff_points(cfg.handoff_points), **per_capture)


@dataclass
class Progress:
    elapsed_s: float
    duration_s: float
    samples: int
    message: str


@dataclass
class CaptureResult:
    pid: int
    command: str
    duration_s: float
    started_unix: float
    ended: str  # duration | target_exited | cancelled | daemon_shutdown
    sample_hz: int
    tree: CallTree
    stats: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    hostname: str = ""
    mode: str = ""  # GPU call-path mode when GPU probes ran
    trace: list[dict[str, Any]] = field(default_factory=list)  # trace mode: docs/device-activity.md
    compiles: list[Compile] = field(default_factory=list)  # torch.compile's compiles (host/torch_compile.py)


_releasing: set[threading.Thread] = set()  # captures whose probes are being detached behind their profile
_releasing_lock = threading.Lock()


def _release(session: int, target: Target, detach: Callable[[], bool], give_back: Callable[[bool], None],
             background: bool, delivered: threading.Event | None = None) -> None:
    """Detaches every family's probes and gives the program back (probes/programs.py: kept for the next
    capture when every detach went well): in a thread of its own when the capture's profile is built (its
    delivery need not wait for it), else at once. The thread starts detaching once `delivered` is set (at most
    RELEASE_WAIT_S later): detaching is Python work under the GIL, and done while the profile is converted and
    sent it slowed those (a ResNet-50 capture's probes take about a second)."""

    def run() -> None:
        if delivered is not None:
            delivered.wait(RELEASE_WAIT_S)
        t0 = time.monotonic()
        try:
            clean = False
            try:
                clean = detach()
            finally:
                give_back(clean)
            log.info("probes detached", extra={"session": session, "pid": target.pid,
                                               "detach_s": round(time.monotonic() - t0, 3)})
        finally:
            with _releasing_lock:
                _releasing.discard(threading.current_thread())

    if not background:
        run()
        return
    t = threading.Thread(target=run, name=f"release-{session}", daemon=True)
    with _releasing_lock:
        _releasing.add(t)
    t.start()


def wait_released(timeout_s: float) -> bool:
    """Waits (at most timeout_s) for the probes of finished captures to be detached; True when all are."""
    deadline = time.monotonic() + timeout_s
    while True:
        with _releasing_lock:
            pending = list(_releasing)
        if not pending:
            return True
        for t in pending:
            t.join(max(0.0, deadline - time.monotonic()))
        if time.monotonic() >= deadline:
            with _releasing_lock:
                return not _releasing


class Capture:
    """Runs in the thread of the request that asked for it; reports progress through a callback."""

    def __init__(self, session_id: int, pid: int, opts: CaptureOptions, symbols: SymbolCache,
                 shutdown: threading.Event, unwind_tables: Any = None,
                 on_window: Callable[[CaptureResult, float, float], None] | None = None, *,
                 handle: ProcessHandle | None = None, guard: CredentialGuard | None = None, uid: int = 0,
                 programs_pool: programs.ProgramPool | None = None) -> None:
        self.id = session_id
        self.pid = pid
        self.opts = opts
        self.symbols = symbols
        self.unwind_tables = unwind_tables  # the daemon's unwind table cache, shared by every capture
        self.shutdown = shutdown
        self.state = "starting"
        self.started_unix = time.time()
        ProbeSet.sampler_of(opts)  # a rate out of range fails here, before anything is read
        self.programs = programs_pool if programs_pool is not None else programs.daemon_pool()
        self.probes: ProbeSet | None = None
        self.samples = 0
        self.command = ""
        self._bpf: Any = None
        self.stop_requested = threading.Event()  # `deepctx stop`: end now, keep what was captured
        # Set once the profile is in the client's hands (see _release); set from the start when no client
        # waits for it (continuous mode): Attach clears it and sets it after its last message.
        self.delivered = threading.Event()
        self.delivered.set()
        self._wake: int | None = None  # a pipe's write end the capture loop polls: request_stop() wakes it
        self._wake_lock = threading.Lock()
        self.on_window = on_window  # continuous mode: gets every window's profile with its start and end
        self.handle = handle  # the process bound when it was authorized (else bound in run()); closed by run()
        self.guard = guard  # for a caller outside root and `deepctx`: re-checks the target (capture_guard.py)
        self.uid = uid  # whose capture it is (the caller's, or the process owner's in continuous mode): quotas
        self.continuous = on_window is not None
        self.target: Target | None = None
        self._last_maps: tuple[Any, str] = (None, "")  # (the space, the maps text last merged into it)
        self.windows_lost = 0  # continuous mode: windows whose build failed (in the log)
        self.gpu_probed_s: float | None = None  # seconds the GPU probes were attached in the window being built
        self.device_shares: DeviceShares | None = None  # what the agent recorded in its shares of that window
        # that window's GPU busy rates attached and detached (daemon/busy_meter.py), or None and why not
        self.gpu_busy: BusyFits | None = None
        # What the window's build reuses from the capture loop (ProbeSet.resolve_ahead): GPU stack id -> frames
        self._native: NativeSymbolizer | None = None
        self._gpu_frames: dict[int, list[Frame]] = {}
        self._resolved_ahead = 0  # of them, by resolve_ahead passes
        self._share: ProgramShare | None = None  # what the captures on its program coordinate
        self._stack_clears = 0  # the share's stack_clears its resolved-ahead ids were read under
        self._stats_base: dict[str, int] = {}  # a program joined in use: its running totals at the attach

    @property
    def warnings(self) -> list[str]:
        return list(self.target.warnings) if self.target is not None else []

    @property
    def families(self) -> list[ProbeFamily]:
        return self.probes.families if self.probes is not None else []

    @property
    def probe_names(self) -> list[str]:
        return self.probes.names if self.probes is not None else []

    def request_stop(self) -> None:
        """`deepctx stop`: end the capture now (the loop wakes at once instead of at its next poll)."""
        self.stop_requested.set()
        with self._wake_lock:
            if self._wake is not None:
                try:
                    os.write(self._wake, b"s")
                except OSError:  # full (already woken)
                    pass

    def live_stats(self) -> dict[str, int]:
        bpf = self._bpf
        if bpf is None:
            return {"cpu_samples": self.samples}
        try:
            out = self._own(self.probes.stats(bpf)) if self.probes is not None else {}
            if self._resolved_ahead:
                out["gpu_stacks_resolved_ahead"] = self._resolved_ahead
            return out
        except Exception:  # the program is being torn down
            return {"cpu_samples": self.samples}

    def run(self, progress: Callable[[Progress], None], cancelled: Callable[[], bool]) -> CaptureResult:
        try:
            return self._run_bound(progress, cancelled)
        except CredentialsChanged:
            raise
        except Exception:
            # whatever ended the capture, a target that changed its credentials is said as such
            self._check_guard(force=True)
            raise
        finally:
            if self.handle is not None:
                self.handle.close()
                self.handle = None  # bound for this run only

    def _run_bound(self, progress: Callable[[Progress], None], cancelled: Callable[[], bool]) -> CaptureResult:
        try:
            if self.handle is None:
                self.handle = ProcessHandle.open(self.pid)
            info = procfs.process_info(self.pid)
            space = procfs.AddressSpace(procfs.read_maps(self.pid))
            self.handle.ensure()  # what was read is the bound process's
        except (procfs.ProcessGone, ProcessLookupError) as e:
            raise NotFound(f"process {self.pid} does not exist (it may have exited)") from e
        except PermissionError as e:  # another PID namespace's init, a process the kernel hides from us
            raise PermissionDenied(f"process {self.pid} cannot be read by deepctxd ({e.strerror}: {e.filename}); "
                                   "it may belong to another user namespace or be protected by a security "
                                   "module") from e
        self.command = info.command
        target = Target(self.pid, info, space, handle=self.handle)
        self.target = target
        try:
            return self._run(target, self.handle.pidfd, progress, cancelled)
        except (OSError, procfs.ProcessGone) as e:
            # Gone while its files and memory were being read (before its probes were attached): say so,
            # rather than report the failed read. After that, a target's exit ends the capture as
            # target_exited; a read that still fails is a fault of the daemon's, not the target's exit
            if procfs.is_alive(self.pid) or self.state in ("capturing", "building"):
                raise
            raise NotFound(f"process {self.pid} exited while deepctx was attaching to it") from e

    def _check_guard(self, force: bool = False) -> None:
        """Raises CredentialsChanged when the guard says the capture must end with nothing returned."""
        if self.guard is None or not (force or self.guard.due()):
            return
        why = self.guard.check()
        if why is not None:
            log.warning("capture ended: target changed", extra={"session": self.id, "pid": self.pid, "reason": why})
            raise CredentialsChanged(why)

    def _run(self, target: Target, pidfd: int, progress: Callable[[Progress], None],
             cancelled: Callable[[], bool]) -> CaptureResult:
        opts = self.opts
        progress(Progress(0.0, opts.duration_s, 0, "inspecting target"))
        self.state = "preparing"
        probes = self.probes = ProbeSet.choose(opts, target, self.symbols, self.unwind_tables)
        progress(Progress(0.0, opts.duration_s, 0, "loading probes"))
        self.state = "compiling"
        t_compile = time.monotonic()
        # a loaded one where a capture of this kind ran before (or is about to give one back)
        prog = self.programs.acquire(probes.families,
                                     give_up=lambda: self.shutdown.is_set() or self.stop_requested.is_set(),
                                     share_key=probes.share_key())
        joined = bool(prog.share.users)  # other captures run on it: its counters did not start at zero
        prog.share.join(target.pid)  # before its probes count: what is taken at a cut is kept for it
        self._share, self._stack_clears = prog.share, prog.share.stack_clears
        bpf = self._bpf = prog.bpf
        self.clock_offset_ns = clock_offset_ns()  # trace events: BPF's clock -> Unix time
        thread_names: dict[int, str] = {}
        built = False
        duty: DutyCycle | None = None
        wake_r = -1
        try:
            t_attach = time.monotonic()
            probes.attach(bpf, target)
            log.info("probes ready", extra={"session": self.id, "pid": target.pid, "families": self.probe_names,
                                            "program": prog.key, "compiled": prog.built_for == "capture",
                                            "shared_with": len(prog.share.users) - 1,
                                            "compile_s": round(t_attach - t_compile, 3),
                                            "attach_s": round(time.monotonic() - t_attach, 3),
                                            "attach_parts": probes.attach_s})
            if joined:  # the program's counters so far are the other captures': this one's stats count from here
                self._stats_base = probes.program_totals(bpf)
            native_heap.release()  # an attach's transient peak (tables read, numpy's work arrays) goes back
            self._refresh(target, thread_names, refresh_maps=False)  # the threads there when it went live
            self.state = "capturing"
            duty = DutyCycle.of(self, opts)  # opens NVML, before the clock starts
            t0 = time.monotonic()
            if duty is not None:
                duty.window_at = t0
            ended = "duration"
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            with self._wake_lock:
                self._wake = wake_w
            poller.register(wake_r, select.POLLIN)
            last_maps = last_prewarm = 0.0
            window_t0, window_unix = t0, time.time()
            # windows end at the same instants for every capture on the program (probes/program_share.py):
            # window_s apart from the first one's start; a capture that joined later ends its first at the next
            anchor = prog.share.anchor(t0) if opts.window_s else t0
            window_end = next_cut(t0, opts.window_s, anchor) if opts.window_s else float("inf")
            # the profile's start is its clock's (duration_s counts from t0), not the request's: compile and
            # attach came before it (0.4 s and more on a busy machine), and a window over
            # [started_unix, + duration_s] must hold what the capture counted
            self.started_unix = window_unix
            while True:
                elapsed = time.monotonic() - t0
                if elapsed >= opts.duration_s:
                    break
                if cancelled():
                    ended = "cancelled"
                    break
                if self.stop_requested.is_set():
                    ended = "stopped"
                    break
                if self.shutdown.is_set():
                    ended = "daemon_shutdown"
                    break
                # The pidfd turns readable the moment the target exits: no polling delay.
                busy = probes.busy()
                wait_s = min(BUSY_POLL_INTERVAL_S if busy else POLL_INTERVAL_S, opts.duration_s - elapsed)
                if duty is not None:
                    wait_s = min(wait_s, duty.next_switch_s(time.monotonic() - window_t0))
                wait_s = min(wait_s, window_end - time.monotonic())
                # request_stop() sets the flag before it writes the wake pipe: the check below sees it
                if any(fd == pidfd for fd, _ in poller.poll(max(wait_s, 0.0) * 1000)):
                    ended = "target_exited"
                    break
                if self.stop_requested.is_set():
                    continue  # ends at the top of the loop, after one more look at the live process
                self._check_guard()
                try:
                    if duty is not None:  # on time: the refresh and polls below can take most of a second for a
                        duty.update(time.monotonic() - window_t0)  # PyTorch process, which the probes stayed attached
                    now = time.monotonic()
                    maps_due = now - last_maps >= probes.maps_refresh_s
                    # stack ids read before the mappings are refreshed: each was captured in a mapping it knows
                    if self._share is not None and self._share.stack_clears != self._stack_clears:
                        # another capture on the program emptied its stack maps: the ids resolved ahead are gone
                        self._gpu_frames, self._resolved_ahead = {}, 0
                        self._stack_clears = self._share.stack_clears
                    ahead = (probes.ahead_ids(bpf, self._inputs(thread_names, 0.0))
                             if maps_due and now - last_prewarm >= PREWARM_INTERVAL_S else None)
                    self._refresh(target, thread_names, refresh_maps=maps_due)
                    if maps_due:
                        last_maps = now
                    probes.poll(bpf, target)
                    if ahead is not None:
                        inputs = self._inputs(thread_names, 0.0)
                        probes.resolve_ahead(bpf, target, inputs, ahead, PREWARM_BUDGET_S)
                        self._resolved_ahead = inputs.resolved_ahead
                        last_prewarm = time.monotonic()
                    if duty is not None:
                        duty.update(time.monotonic() - window_t0)
                    self.samples = probes.samples(bpf)
                    progress(Progress(min(time.monotonic() - t0, opts.duration_s), opts.duration_s, self.samples,
                                      "capturing"))
                    if time.monotonic() >= window_end:
                        cut, cut_unix = time.monotonic(), time.time()
                        index = cut_index(cut, opts.window_s, anchor)  # the latest boundary passed (a slow poll: more)
                        self.gpu_probed_s = duty.end_window(cut - window_t0) if duty else None
                        self.device_shares = duty.take_shares() if duty else None
                        self.gpu_busy = duty.take_busy() if duty else None
                        self._cut_window(bpf, target, thread_names, cut - window_t0, window_unix, index)
                        # the next window began at the cut: what ran while this one was built is in it
                        window_t0, window_unix = cut, cut_unix
                        window_end = anchor + (index + 1) * opts.window_s
                        if duty is not None:
                            duty.start_window(time.monotonic() - window_t0)
                except (OSError, procfs.ProcessGone):
                    # The target exited while its probes were switched or its files read (before the
                    # pidfd said so): the capture ends as target_exited and keeps what it counted.
                    if procfs.is_alive(target.pid):
                        raise
                    ended = "target_exited"
                    break
            duration = time.monotonic() - (window_t0 if opts.window_s else t0)
            t_end = time.monotonic()
            progress(Progress(min(duration, opts.duration_s), opts.duration_s, self.samples, "collecting"))
            probes.finish(bpf, target, exited=ended == "target_exited")
            self.state = "building"
            if program_stats.stats_enabled():  # what each probe cost, for benches that turned the counting on
                log.info("probe costs", extra={"session": self.id, "pid": target.pid,
                                               "programs": program_stats.ran(program_stats.program_stats(bpf))})
            self.samples = probes.samples(bpf)
            progress(Progress(min(duration, opts.duration_s), opts.duration_s, self.samples, "symbolizing"))
            if ended != "target_exited":
                self._refresh(target, thread_names, refresh_maps=True)
                probes.poll(bpf, target)  # last chance to name what only the live process can tell
            self._check_guard(force=True)  # sampling has stopped: nothing later comes into the maps
            t_build = time.monotonic()
            self.gpu_probed_s = duty.end_window(duration) if duty else None
            self.device_shares = duty.take_shares() if duty else None
            self.gpu_busy = duty.take_busy() if duty else None
            with profiled("build"):
                result = self._build(bpf, target, thread_names, duration, ended)
            built = True
            if opts.window_s:
                result.started_unix = window_unix  # the last window's
            log.info("profile built", extra={"session": self.id, "pid": target.pid, "nodes": len(result.tree.nodes),
                                             "ended": ended, "collect_s": round(t_build - t_end, 3),
                                             "build_s": round(time.monotonic() - t_build, 3)})
            return result
        finally:
            if duty is not None:
                duty.close()
            with self._wake_lock:
                if self._wake is not None:
                    os.close(self._wake)
                    os.close(wake_r)
                    self._wake = None
            self._bpf = None
            # Detaching takes about a second on a GPU process (uprobes on the CUDA libraries, perf events on
            # every CPU): once the profile is built it happens behind its delivery, not before it. The next
            # capture of this kind waits for the program instead of compiling another.
            self.programs.releasing(prog)

            def give_back(clean: bool) -> None:
                prog.share.leave(target.pid)
                self.programs.release(prog, reusable=clean)

            _release(self.id, target, lambda: probes.detach(bpf, target), give_back, background=built,
                     delivered=self.delivered)

    def _cut_window(self, bpf: Any, target: Target, thread_names: dict[int, str], duration: float,
                    start_unix: float, index: int) -> None:
        """Continuous mode: the window's counts leave the maps first (take_window), so that what the probes
        count while it is built goes to the next window; this window's profile goes to on_window. index: the
        cut's number, as every capture on the program numbers it."""
        probes = self.probes
        assert probes is not None
        probes.take_window(bpf, target, index)
        try:
            result = self._build(bpf, target, thread_names, duration, "window")
        except Exception:  # one window lost, said in the log; the capture goes on with the next
            log.exception("window not built", extra={"session": self.id, "pid": target.pid})
            self.windows_lost += 1
            return
        finally:  # the taken counts are released either way: the next window reads the maps again
            self._native, self._gpu_frames, self._resolved_ahead = None, {}, 0  # its ids start again
            share = self._share
            stacks_free = share.done(target.pid, index) if share is not None else True
            probes.clear_window(bpf, target, stacks_free)
            if share is not None:
                if stacks_free:  # the stack maps may have been emptied: every capture on it forgets their ids
                    share.cleared()
                self._stack_clears = share.stack_clears
        result.started_unix = start_unix
        if self.on_window is not None:
            try:
                self.on_window(result, start_unix, start_unix + duration)
            except Exception:
                log.exception("window not stored", extra={"session": self.id, "pid": target.pid})

    def _own(self, stats: dict[str, int]) -> dict[str, int]:
        """A program joined in use: its running totals counted since this capture attached."""
        for k, base in self._stats_base.items():
            if k in stats:
                stats[k] = max(0, stats[k] - base)
        return stats

    def _symbolizer(self) -> NativeSymbolizer:
        if self._native is None:
            self._native = NativeSymbolizer(self.symbols)
        return self._native

    def _refresh(self, target: Target, thread_names: dict[int, str], refresh_maps: bool) -> None:
        """Remember what only the live process can tell: thread names and mappings (kept after unmap)."""
        try:
            for tid in procfs.thread_ids(target.pid):
                if tid not in thread_names:
                    name = procfs.thread_name(target.pid, tid)
                    if name:
                        thread_names[tid] = name
            if refresh_maps:
                # parsed and merged only when it changed (twice a second for every GPU process otherwise)
                text = procfs.read_maps_text(target.pid)
                space, merged = self._last_maps
                if space is not target.space or merged != text:
                    target.space = target.space.merged_with(procfs.AddressSpace(procfs.parse_maps(text)))
                    self._last_maps = (target.space, text)
        except procfs.ProcessGone:
            pass

    def _inputs(self, thread_names: dict[int, str], duration: float) -> BuildInputs:
        return BuildInputs(thread_names, self._symbolizer(), duration, self._gpu_frames, self._resolved_ahead,
                           self.gpu_probed_s, self.device_shares, self.gpu_busy, self.clock_offset_ns)

    def _build(self, bpf: Any, target: Target, thread_names: dict[int, str], duration: float,
               ended: str) -> CaptureResult:
        assert self.probes is not None
        built = self.probes.build(bpf, target, self._inputs(thread_names, duration))
        stats = self._own(built.stats)
        if self._share is not None and len(self._share.users) > 1:
            stats["program_captures"] = len(self._share.users)  # its counters count every capture's process
        if self.continuous:
            stats["continuous_windows_lost"] = self.windows_lost
        warnings = list(target.warnings) + built.warnings
        if ended == "target_exited":
            warnings.append(f"process {target.pid} exited after {duration:.2f} s of the requested "
                            f"{self.opts.duration_s:g} s; the profile holds what was captured until then")
        elif ended == "cancelled":
            warnings.append("capture cancelled by the client")
        elif ended == "daemon_shutdown":
            warnings.append("capture cut short: deepctxd is shutting down")
        warnings += stat_warnings(stats)
        return CaptureResult(
            pid=target.pid, command=target.info.command, duration_s=duration, started_unix=self.started_unix,
            ended=ended, sample_hz=self.opts.sample_hz, tree=built.tree, stats=stats, warnings=warnings,
            hostname=built.hostname, mode=built.mode, trace=built.trace, compiles=built.compiles,
        )


def next_cut(t: float, window_s: float, anchor: float) -> float:
    """The first window boundary after t: window_s apart from anchor on CLOCK_MONOTONIC, as every capture on
    a shared program cuts its windows (probes/program_share.py)."""
    return anchor + (cut_index(t, window_s, anchor) + 1) * window_s


def cut_index(t: float, window_s: float, anchor: float) -> int:
    """The number of the last window boundary at or before t."""
    return int((t - anchor) // window_s)


def stat_warnings(stats: dict[str, int]) -> list[str]:
    """The warnings a profile's stats call for (lost, dropped, unnamed): a function of the stats alone, so a
    continuous window can say them again for its own share of the capture's counters."""
    out = []
    lost = stats.get("cpu_user_stacks_lost", 0) + stats.get("cpu_samples_dropped_map_full", 0)
    if lost:
        out.append(f"{lost} CPU samples lost their call path or were dropped (see stats)")
    gpu_lost = stats.get("gpu_api_calls_dropped_map_full", 0) + stats.get("gpu_api_stacks_lost", 0)
    if gpu_lost:
        out.append(f"{gpu_lost} GPU API calls were dropped or lost their call path (see stats)")
    if stats.get("continuous_windows_lost"):
        out.append(f"{stats['continuous_windows_lost']} continuous windows could not be built and are missing "
                   "(deepctxd's log says why)")
    return out + device_warnings(stats)  # nothing without the device family's stats


__all__ = ["Capture", "CaptureOptions", "CaptureResult", "Progress", "METRICS"]
