"""Loaded BPF programs, compiled and loaded once per daemon and handed from one capture to the next (#30.1).

Compiling a program costs 2.2 to 2.6 s of clang on the CI VM and loading its functions about 2 s of
verifier; both used to happen for every capture. The program text is now a function of the probe families
and the daemon's settings only (what changes per capture or per target is in maps: probes/family.py), so a
program is kept by the hash of its text and flags. A capture takes an idle one, or compiles one when none
is idle; once its families detached, the program's maps are emptied and it goes back, loaded functions and
all, for the next capture of that kind. A program being compiled ahead (prewarm) or being emptied after a
capture is waited for rather than compiled a second time. The counters prove it: `deepctx status` shows
them, and a second capture leaves `compiled` and `loaded` where they were.

Captures that run at once share a program where they ask for it with the same share key (daemon/probe_set.py:
continuous mode's processes, one-shot attaches made together): the second attaches to the first one's
program, and what the program holds for both (perf events, count generations, the windows' cuts, stack maps)
is coordinated by its ProgramShare (probes/program_share.py). Its maps are emptied once its last capture
gives it back. Captures without a share key (those with device activity) get a program of their own, so that
nothing such a capture reads was written for another.
"""

from __future__ import annotations

import ctypes as ct
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from deepctx.probes import compose
from deepctx.probes.family import ProbeFamily
from deepctx.probes.maps import delete_keys, drain_rings, table_names
from deepctx.probes.program_cache import CacheCounters, ProgramCache, is_cached
from deepctx.probes.program_share import ProgramShare, bind_share

log = logging.getLogger("deepctx.programs")

# bpf_map_type values (uapi/linux/bpf.h)
_HASHES = {1, 5, 9, 10}  # HASH, PERCPU_HASH, LRU_HASH, LRU_PERCPU_HASH
_ARRAYS = {2, 6}  # ARRAY, PERCPU_ARRAY
_STACK_TRACE = 7
_QUEUES = {22, 23}  # QUEUE, STACK
# Arrays up to this size are zeroed between captures (counters, configs, scratch, ring cursors). Larger
# ones (unwind rows, the correlation rings) are written before they are read: their indexes (hashes) are
# emptied, and the join checks the pid and the correlation id of a slot.
ZEROED_ARRAY_MAX = 4096
MAX_IDLE = 4  # idle programs kept, one of a kind (their maps hold kernel memory); the least recently used goes first
# how long a capture waits for a program of its kind being compiled ahead or emptied: about as long as compiling
# one (up to a minute on a busy 2-CPU machine); a compile of its own beside it would only slow both down
WAIT_S = 120.0
WAIT_SLICE_S = 0.5  # how often a waiting capture looks whether it is ending


def program_key(families: Sequence[ProbeFamily]) -> str:
    """What makes two programs the same: their text and their compile flags."""
    text = compose.compose_source(families) + "\0" + "\0".join(compose.compose_cflags(families))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Program:
    """One compiled program (a bcc BPF object) and what the pool knows about it."""

    key: str
    bpf: Any
    funcs_counted: int = 0  # its loaded functions already counted in ProgramPool.loaded
    captures: int = 0  # captures it served
    built_for: str = ""  # "capture" while the capture that compiled it holds it, "" after (for the log)
    share: ProgramShare = field(default_factory=ProgramShare)  # what its captures at once coordinate
    holders: int = 0  # captures holding it now
    share_key: str | None = None  # the key captures join it by while it is in use
    dirty: bool = False  # a capture on it did not detach cleanly: freed once the last one gives it back
    marked: bool = False  # counted in the pool's pending (releasing): a capture of its kind waits for it


@dataclass
class ProgramCounters:
    compiled: int = 0  # programs compiled (clang)
    from_disk: int = 0  # programs whose code came from the disk cache (only their maps compiled)
    loaded: int = 0  # BPF functions loaded into the kernel (verifier runs)
    reused: int = 0  # captures that got an already loaded program
    captures_served: int = 0  # captures that got a program
    discarded: int = 0  # programs freed: evicted, or not reusable after a capture
    shared: int = 0  # captures that attached to a program another capture held (counted in reused too)

    def as_totals(self) -> dict[str, int]:
        """The daemon's Status totals (map<string, int64>: fields added, none changed)."""
        return {"bpf_programs_built": self.compiled + self.from_disk, "bpf_programs_compiled": self.compiled,
                "bpf_programs_from_disk": self.from_disk,
                "bpf_programs_loaded": self.loaded,
                "bpf_programs_reused": self.reused, "bpf_programs_discarded": self.discarded,
                "bpf_programs_shared": self.shared, "captures_served": self.captures_served}


class ProgramPool:
    """The daemon's loaded programs (one pool per daemon; tests make their own)."""

    def __init__(self, max_idle: int = MAX_IDLE, wait_s: float = WAIT_S,
                 compile_fn: Callable[[Sequence[ProbeFamily]], Any] | None = None,
                 free_fn: Callable[[Any], None] = compose.cleanup_program, cache: ProgramCache | None = None) -> None:
        self.max_idle = max_idle
        self.wait_s = wait_s
        self.counters = ProgramCounters()
        self.cache = cache  # compiled programs on disk (probes/program_cache.py), used by the default compile_fn
        self._compile = compile_fn or (lambda families: compose.compile_program(families, self.cache))
        self._free = free_fn
        self._cond = threading.Condition()
        self._idle: OrderedDict[int, Program] = OrderedDict()  # by id(), least recently used first
        self._pending: dict[str, int] = {}  # programs of a key being compiled ahead or emptied
        self._shared: dict[str, Program] = {}  # share key -> the program in use that captures join

    # --- taking and giving back ----------------------------------------------------------------------

    def acquire(self, families: Sequence[ProbeFamily], give_up: Callable[[], bool] = lambda: False,
                share_key: str | None = None) -> Program:
        """A loaded program for these families: one in use under share_key (joined), an idle one, one that is
        about to be idle, or a new one. give_up (checked every WAIT_SLICE_S while waiting): the capture is
        ending (daemon shutdown, `deepctx stop`), so it waits no longer for a program of its kind."""
        key = program_key(families)
        deadline = time.monotonic() + self.wait_s
        with self._cond:
            while True:
                prog = self._join(share_key)
                if prog is None:
                    prog = self._take_idle(key)
                    if prog is not None:
                        self.counters.reused += 1
                        prog.built_for = ""
                        self._hold(prog, share_key)
                if prog is not None:
                    return prog
                left = deadline - time.monotonic()
                if not self._pending.get(key) or left <= 0 or give_up():
                    break
                self._cond.wait(min(left, WAIT_SLICE_S))
            if share_key is not None:  # captures of its kind that start meanwhile wait for this one, and join it
                self._pending[key] = self._pending.get(key, 0) + 1
        try:
            prog = self._build(key, families)
        except BaseException:
            if share_key is not None:
                with self._cond:
                    self._done_pending(key)
                    self._cond.notify_all()
            raise
        prog.built_for = "capture"
        with self._cond:  # held under share_key before the captures waiting for this compile look again
            if share_key is not None:
                self._done_pending(key)
            self._hold(prog, share_key)
            self._cond.notify_all()
        return prog

    def _join(self, share_key: str | None) -> Program | None:
        """The program in use under share_key, now held once more (under the lock)."""
        prog = self._shared.get(share_key) if share_key is not None else None
        if prog is None:
            return None
        if prog.marked:  # its one capture was about to give it back: no longer
            prog.marked = False
            self._done_pending(prog.key)
        self.counters.reused += 1
        self.counters.shared += 1
        self._hold(prog, share_key)
        return prog

    def _hold(self, prog: Program, share_key: str | None) -> None:
        self.counters.captures_served += 1
        prog.captures += 1
        prog.holders += 1
        if prog.holders > 1:
            prog.built_for = ""
        if share_key is not None and share_key not in self._shared:
            self._shared[share_key] = prog
            prog.share_key = share_key

    def release(self, prog: Program, reusable: bool = True) -> None:
        """After a capture's families detached: while other captures hold the program, nothing more; after
        the last, its maps are emptied and it waits for the next capture of its kind, or it is freed
        (a capture on it not reusable, or something is still attached to it)."""
        self.count_loads(prog)
        with self._cond:
            prog.holders -= 1
            prog.dirty = prog.dirty or not reusable
            if prog.holders > 0:
                return
            if prog.share_key is not None and self._shared.get(prog.share_key) is prog:
                del self._shared[prog.share_key]
            prog.share_key = None
            if not prog.marked:  # a capture of its kind that starts while it is emptied waits for it
                self._pending[prog.key] = self._pending.get(prog.key, 0) + 1
            prog.marked = False
        why = "the capture did not detach cleanly" if prog.dirty else ""
        if not why:
            why = _still_attached(prog.bpf)
        if not why:
            try:
                reset_maps(prog.bpf)
                prog.share.reset()
            except Exception as e:  # a map that would not empty: a fresh program is safer than stale counts
                why = f"its maps could not be emptied: {e}"
        evicted: list[Program] = []
        with self._cond:
            self._done_pending(prog.key)
            if not why:
                evicted += self._keep_idle(prog)
            self._cond.notify_all()
        if why:
            log.info("program not kept", extra={"program": prog.key, "reason": why})
            evicted.append(prog)
        for old in evicted:
            self._discard(old)

    def releasing(self, prog: Program) -> None:
        """The capture that holds prog is about to detach and release it: a capture of the same kind that
        starts meanwhile waits for it instead of compiling another (when no other capture holds it)."""
        with self._cond:
            if prog.holders == 1 and not prog.marked:
                prog.marked = True
                self._pending[prog.key] = self._pending.get(prog.key, 0) + 1

    def prewarm(self, families: Sequence[ProbeFamily]) -> None:
        """Compiles and loads a program before any capture asks for it (at daemon start, in a thread of its
        own): the first capture of that kind then only attaches."""
        key = program_key(families)
        with self._cond:
            self._pending[key] = self._pending.get(key, 0) + 1
        try:
            prog = self._build(key, families)
        except Exception:
            with self._cond:
                self._done_pending(key)
                self._cond.notify_all()
            log.exception("program not compiled ahead", extra={"program": key})
            return
        with self._cond:
            self._done_pending(key)
            evicted = self._keep_idle(prog)
            self._cond.notify_all()
        for old in evicted:
            self._discard(old)

    def close(self) -> None:
        """Frees every idle program (the daemon stops)."""
        with self._cond:
            idle = list(self._idle.values())
            self._idle.clear()
        for prog in idle:
            self._discard(prog)

    # --- counters --------------------------------------------------------------------------------------

    def count_loads(self, prog: Program) -> None:
        """Counts the functions bcc loaded into the kernel for prog since the last count (bcc loads a
        function the first time it is attached, and keeps its fd for the next attach)."""
        n = len(getattr(prog.bpf, "funcs", {}))
        with self._cond:
            if n > prog.funcs_counted:
                self.counters.loaded += n - prog.funcs_counted
                prog.funcs_counted = n

    def totals(self) -> dict[str, int]:
        with self._cond:
            out = self.counters.as_totals()
            out["bpf_programs_idle"] = len(self._idle)
            out["bpf_programs_building"] = sum(self._pending.values())  # compiled ahead or emptied, now
        # the disk cache's counters stay 0 without one (cache_programs off)
        return out | (self.cache.counters if self.cache is not None else CacheCounters()).as_totals()

    # --- inside --------------------------------------------------------------------------------------

    def _keep_idle(self, prog: Program) -> list[Program]:
        """Puts prog among the idle programs (under the lock) and returns those to free: another idle one of
        its kind (one of a kind serves the next capture; a second, left by captures that ran at once, only
        holds its maps' kernel memory, about 250 MB for a GPU program with native unwinding), then the least
        recently used beyond max_idle."""
        same = [ident for ident, old in self._idle.items() if old.key == prog.key]
        out = [self._idle.pop(ident) for ident in same]
        self._idle[id(prog)] = prog
        while len(self._idle) > self.max_idle:
            out.append(self._idle.popitem(last=False)[1])
        return out

    def _take_idle(self, key: str) -> Program | None:
        for ident, prog in reversed(self._idle.items()):  # the most recently used first (warm caches)
            if prog.key == key:
                del self._idle[ident]
                return prog
        return None

    def _done_pending(self, key: str) -> None:
        n = self._pending.get(key, 0) - 1
        if n > 0:
            self._pending[key] = n
        else:
            self._pending.pop(key, None)

    def _build(self, key: str, families: Sequence[ProbeFamily]) -> Program:
        t0 = time.monotonic()
        bpf = self._compile(families)
        from_disk = is_cached(bpf)
        prog = Program(key, bpf)
        bind_share(bpf, prog.share)
        if not from_disk:
            with self._cond:
                self.counters.compiled += 1
        try:
            for fam in families:
                fam.load(bpf)  # the verifier runs here, once per program
        except Exception as e:
            self._free(bpf)
            if not from_disk or self.cache is None:
                raise
            # the kernel refused the cached functions: compile them (the key is not loaded from disk again)
            self.cache.refuse(bpf.deepctx_cache_key, f"{type(e).__name__}: {e}")
            return self._build(key, families)
        if from_disk:
            with self._cond:
                self.counters.from_disk += 1
        self.count_loads(prog)
        log.info("program loaded", extra={"program": key, "families": [f.name for f in families],
                                          "defines": [f for f in compose.compose_cflags(families) if f.startswith("-D")],
                                          "functions": prog.funcs_counted, "from_disk": from_disk,
                                          "load_s": round(time.monotonic() - t0, 3)})
        return prog

    def _discard(self, prog: Program) -> None:
        with self._cond:
            self.counters.discarded += 1
        try:
            self._free(prog.bpf)
        except Exception:
            log.exception("program not freed", extra={"program": prog.key})


def _still_attached(bpf: Any) -> str:
    """Why the program cannot go back to the pool: an event bcc still holds for it ("" when none)."""
    for attr in ("open_perf_events", "kprobe_fds", "uprobe_fds", "tracepoint_fds", "raw_tracepoint_fds"):
        if getattr(bpf, attr, None):
            return f"{attr} still open"
    return ""


def map_names(bpf: Any) -> list[tuple[str, int, int]]:
    """(name, bpf_map_type, max_entries) of every map of a bcc program."""
    from bcc.libbcc import lib

    out = []
    for i, name in enumerate(table_names(bpf.module)):
        out.append((name.decode(), lib.bpf_table_type_id(bpf.module, i), int(lib.bpf_table_max_entries_id(bpf.module, i))))
    return out


def _empty_hash(table: Any) -> None:
    """Deletes every entry by key, values never read: read out in batches (lookup-and-delete), a map of large
    values made a large buffer (native_procs' 32 KiB entries: 128 MiB for 4096 of them, and as much again
    copied; deepctxd's peak memory rose by 250 MB at its first release)."""
    delete_keys(table, list(table.keys()))


def reset_maps(bpf: Any) -> None:
    """Empties what one capture left in a program's maps before the next one gets it: every hash and stack
    map, queued entries, and the small arrays (counters, settings, scratch, cursors) zeroed."""
    for name, kind, entries in map_names(bpf):
        if kind in _HASHES:
            _empty_hash(bpf[name.encode()])
        elif kind == _STACK_TRACE:
            bpf[name.encode()].clear()
        elif kind in _ARRAYS and entries <= ZEROED_ARRAY_MAX:
            table = bpf[name.encode()]
            zero = table.Leaf()
            for i in range(entries):
                table[ct.c_int(i)] = zero
        elif kind in _QUEUES:
            table = bpf[name.encode()]
            while True:
                try:
                    table.pop()
                except KeyError:
                    break
    drain_rings(bpf)  # the ring buffers' leftover events


def map_memory(proc: str = "/proc/self") -> dict[str, int]:
    """The BPF maps this process holds open and the kernel memory they take (each map's `memlock` in its
    fdinfo): memory outside the daemon's RSS, mostly the native unwinder's row arrays (UnwindConfig.min_rows:
    128 MiB, once per daemon: probes/unwind_maps.py). Status totals bpf_maps and bpf_map_bytes."""
    count = size = 0
    seen: set[str] = set()  # a map open under several descriptors (the unwinder's shared arrays) counts once
    try:
        fds = os.listdir(f"{proc}/fd")
    except OSError:
        return {"bpf_maps": 0, "bpf_map_bytes": 0}
    for fd in fds:
        try:
            if os.readlink(f"{proc}/fd/{fd}") != "anon_inode:bpf-map":
                continue
            with open(f"{proc}/fdinfo/{fd}") as f:
                info = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:  # closed meanwhile
            continue
        map_id = info.get("map_id", "").strip()
        if map_id and map_id in seen:
            continue
        seen.add(map_id)
        count += 1
        size += int(info.get("memlock", "0").strip() or 0)
    return {"bpf_maps": count, "bpf_map_bytes": size}


_DAEMON_POOL: ProgramPool | None = None
_DAEMON_POOL_LOCK = threading.Lock()


def daemon_pool(cache_dir: str | None = None) -> ProgramPool:
    """The pool of this process (deepctxd's): every capture takes its program from it. cache_dir (at the first
    call): where compiled programs are kept on disk (None: each daemon compiles its programs)."""
    global _DAEMON_POOL
    with _DAEMON_POOL_LOCK:
        if _DAEMON_POOL is None:
            _DAEMON_POOL = ProgramPool(cache=ProgramCache.at(cache_dir) if cache_dir else None)
        return _DAEMON_POOL
