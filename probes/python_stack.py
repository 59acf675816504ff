"""Loader for the CPython stack walker (python_stack.bpf.h): probe family "python".

prepare() finds the interpreter, attach() tells the walker its layout and the threads' states,
poll() keeps the thread map current (a walker miss asks for a refresh), reads the threads' Python names when
that map changes (host/python/thread_names.py: never per sample) and names the code objects of every new stack
while the process is alive, frames() turns a stack id into Python frames.
"""

from __future__ import annotations

import ctypes as ct
import logging
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from deepctx.host.compiled_sources import CompiledSources
from deepctx.host.procfs import ProcessGone, ProcessMemory, pid_namespace, thread_ids, thread_name
from deepctx.host.python.code import CodeReader
from deepctx.host.python.discovery import Interpreter, find_interpreter
from deepctx.host.python.layouts import PyLayout
from deepctx.host.python.pyframe import PyFrameInfo
from deepctx.host.python.stacks import RawFrame, RawStack, prefetch, symbolize_stack
from deepctx.host.python.thread_names import read_thread_names
from deepctx.host.python.threads import ThreadMapper, ThreadState, main_interpreter
from deepctx.probes.family import FamilyDefaults, Target, read_source
from deepctx.probes.maps import clear_stacks, entry_count, percpu_sum
from deepctx.probes.program_share import share_of

log = logging.getLogger("deepctx.python")

# Mirrors of python_stack.h (tests/unit/python/test_abi.py checks them against the header).
PY_NO_OFFSET = 0xFFFFFFFF
PY_OWNER_NONE = 256  # an owner value no frame has
PY_RETRY_NS = 500_000_000
PY_SEARCH_RETRY_NS = 10_000_000
PY_SEARCH_MAX = 32
PY_PROCS_MAX = 256  # Python processes one loaded program walks at once (py_procs' slots)

PYSTACK_STAT_CAPTURES = 0
PYSTACK_STAT_STACKS = 1
PYSTACK_STAT_TSTATE_MISS = 2
PYSTACK_STAT_TRUNCATED = 3
PYSTACK_STAT_READ_ERROR = 4
PYSTACK_STAT_MAP_FULL = 5
PYSTACK_STAT_NEW_LOST = 6
PYSTACK_STAT_FOUND = 7
PYSTACK_STAT_FOUND_LOST = 8
PYSTACK_STAT_RAW_HITS = 9
PYSTACK_STAT_COUNT = 10

STAT_NAMES = {
    PYSTACK_STAT_CAPTURES: "python_captures",
    PYSTACK_STAT_STACKS: "python_stacks",
    PYSTACK_STAT_TSTATE_MISS: "python_tstate_misses",
    PYSTACK_STAT_TRUNCATED: "python_truncated",
    PYSTACK_STAT_READ_ERROR: "python_read_errors",
    PYSTACK_STAT_MAP_FULL: "python_stack_map_full",
    PYSTACK_STAT_NEW_LOST: "python_new_stacks_lost",
    PYSTACK_STAT_FOUND: "python_threads_found",
    PYSTACK_STAT_FOUND_LOST: "python_found_announcements_lost",
    PYSTACK_STAT_RAW_HITS: "python_raw_hits",
}

REFRESH_S = 1.0  # thread states are re-read at least this often, misses or not
# After the walker met new threads, poll often this long: threading's names can only be read while the threads
# live (a data loader's or a pool's threads come in bursts, and may live a fraction of a poll interval)
NEW_THREADS_BUSY_S = 2.0
# a target that exited: code objects found freed this long before the capture saw it gone were freed by its exit
# (the interpreter finalizes while the process still runs); the capture sees an exit within its poll interval
EXIT_GRACE_S = 1.0
WALKER_OWNS = (-1, -1)  # _Proc.threads: an entry the walker wrote (py_found), or one left to it
# Refreshes after a change of the thread map that read the names again while a thread with a thread state has
# none (a thread caught between its start and its entry in threading._active, or one threading does not know)
NAME_RETRIES = 3


class PyProc(ct.Structure):
    _fields_ = [(name, ct.c_uint32) for name in (
        "version", "tstate_ident", "tstate_frame", "cframe_current", "frame_code", "frame_previous",
        "frame_instr", "frame_size", "instr_is_pointer", "frame_owner", "owner_mask", "owner_shim",
        "owner_generator", "frame_is_entry", "entry_mask", "entry_always", "code_adaptive", "code_read",
        "code_read_size", "code_firstlineno", "code_name", "pid", "tstate_next", "ident_tid",
    )] + [(name, ct.c_uint64) for name in ("threads_head", "pidns_dev", "pidns_ino")]


class PyThread(ct.Structure):
    _fields_ = [("tstate", ct.c_uint64), ("ident", ct.c_uint64), ("proc_slot", ct.c_uint32), ("searches", ct.c_uint32)]


class PyFoundThread(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("comm", ct.c_char * 16)]


class PyNewStack(ct.Structure):
    _fields_ = [("id", ct.c_uint64), ("pid", ct.c_uint32), ("tid", ct.c_uint32)]


class PyFrame(ct.Structure):
    _fields_ = [("code", ct.c_uint64), ("tag", ct.c_uint32), ("lasti", ct.c_int32)]


_STACK_TYPES: dict[int, type[ct.Structure]] = {}


def py_stack_type(max_depth: int) -> type[ct.Structure]:
    """struct py_stack for a PY_MAX_DEPTH."""
    if max_depth not in _STACK_TYPES:
        _STACK_TYPES[max_depth] = type(f"PyStack{max_depth}", (ct.Structure,), {"_fields_": [
            ("depth", ct.c_uint32),
            ("flags", ct.c_uint32),
            ("frames", PyFrame * max_depth),
            ("frame_flags", ct.c_uint8 * max_depth),
        ]})
    return _STACK_TYPES[max_depth]


def proc_config(layout: PyLayout) -> PyProc:
    """The walker's view of a layout (struct py_proc)."""
    lo, hi = layout.code_tag_span
    return PyProc(
        version=layout.hexversion,
        tstate_ident=layout.tstate_ident,
        tstate_frame=layout.tstate_frame,
        cframe_current=PY_NO_OFFSET if layout.cframe_current is None else layout.cframe_current,
        frame_code=layout.frame_code,
        frame_previous=layout.frame_previous,
        frame_instr=layout.frame_instr,
        frame_size=layout.frame_size,
        instr_is_pointer=int(layout.instr_is_pointer),
        frame_owner=layout.frame_owner or 0,
        owner_mask=0 if layout.frame_owner is None else 0xFF,
        owner_shim=PY_OWNER_NONE if layout.owner_shim is None else layout.owner_shim,
        owner_generator=PY_OWNER_NONE if layout.owner_generator is None else layout.owner_generator,
        frame_is_entry=layout.frame_is_entry or 0,
        entry_mask=0 if layout.frame_is_entry is None else 0xFF,
        entry_always=int(layout.frame_owner is None),  # 3.10: one eval activation per frame
        code_adaptive=layout.code_adaptive or 0,
        code_read=lo,
        code_read_size=hi - lo,
        code_firstlineno=layout.code_firstlineno - lo,
        code_name=layout.code_name - lo,
        tstate_next=layout.tstate_next,
        ident_tid=PY_NO_OFFSET,
    )


def _value(x: Any) -> int:
    """bcc hands map entries over as ctypes scalars, or as ints (batch operations)."""
    return x if isinstance(x, int) else int(x.value)


def raw_stack(value: ct.Structure) -> RawStack:
    depth = min(int(value.depth), len(value.frames))
    frames = [RawFrame(f.code, f.tag, f.lasti, value.frame_flags[i]) for i, f in enumerate(value.frames[:depth])]
    return RawStack(int(value.flags), frames)


@dataclass
class _Proc:
    """What the family keeps per target process."""

    interp: Interpreter
    mem: ProcessMemory
    codes: CodeReader
    mapper: ThreadMapper
    threads: dict[int, tuple[int, int]] = field(default_factory=dict)  # host tid -> (tstate, ident) written
    last_refresh: float = 0.0
    names: dict[int, str] = field(default_factory=dict)  # host tid -> threading's name (threads gone keep theirs)
    name_reads_left: int = 0  # reads still due for threads without a name since the map last changed
    slot: int = 0  # its entry in py_procs (attach)
    cfg: PyProc = field(default_factory=PyProc)  # what its py_procs entry holds

    @property
    def searching(self) -> bool:
        """The walker looks for this process's new threads itself (py_search_thread)."""
        return bool(self.cfg.threads_head)


class PythonStacks(FamilyDefaults):
    """Probe family "python". Compose it before the families that call python_stack_capture()."""

    name = "python"

    def __init__(self, max_depth: int = 128, stack_entries: int = 16384, thread_entries: int = 16384) -> None:
        self.max_depth = max_depth
        self.stack_entries = stack_entries
        self.thread_entries = thread_entries
        self._procs: dict[int, _Proc] = {}
        self._detached: dict[int, _Proc] = {}
        self._raw: dict[int, RawStack] = {}  # stack id -> frames as walked
        self._owner: dict[int, int] = {}  # stack id -> pid whose memory named it
        self._named: dict[int, list[PyFrameInfo]] = {}
        self.learning = False  # the last poll found new stacks: more may come before the process exits
        self._stack_type = py_stack_type(max_depth)
        self._lost_seen = 0
        self._found_lost_seen = 0
        self.refreshes = 0
        self.name_reads = 0
        self._os_names: dict[int, dict[int, str]] = {}  # pid -> tid -> OS name when the walker met the thread
        self._busy_until = 0.0  # monotonic time until which new threads keep the polls frequent

    # -- ProbeFamily ---------------------------------------------------------------------------------

    def source(self) -> str:
        return read_source("python_stack.bpf.h")

    def defines(self) -> dict[str, int | str]:
        return {
            "DEEPCTX_PYTHON": 1,
            "PY_MAX_DEPTH": self.max_depth,
            "PY_STACKS_MAX": self.stack_entries,
            "PY_THREADS_MAX": self.thread_entries,
            "PY_PROCS_MAX": PY_PROCS_MAX,
        }

    def prepare(self, target: Target) -> None:
        try:
            mem = ProcessMemory(target.pid)
        except ProcessGone as e:
            raise ValueError(f"process {target.pid} exited") from e
        except PermissionError as e:
            raise ValueError(f"cannot read the memory of process {target.pid}: {e}") from e
        try:
            interp = find_interpreter(target.pid, target.space, mem)
        except (MemoryError, OSError) as e:
            mem.close()
            raise ValueError(f"cannot read the interpreter of process {target.pid}: {e}") from e
        except Exception:
            mem.close()
            raise
        self._procs[target.pid] = _Proc(interp, mem, CodeReader(mem, interp), ThreadMapper(mem, interp))
        target.state[self.name] = interp

    def attach(self, bpf: Any, target: Target) -> None:
        proc = self._procs[target.pid]
        proc.slot = share_of(bpf).claim_slot("py_procs", target.pid, PY_PROCS_MAX)
        proc.cfg = proc_config(proc.interp.layout)
        proc.cfg.pid = target.pid
        try:
            proc.cfg.pidns_dev, proc.cfg.pidns_ino = pid_namespace(target.pid)
        except ProcessGone as e:
            raise ValueError(f"process {target.pid} exited") from e
        self._write_proc(bpf, proc)
        bpf[b"py_proc_slots"][ct.c_uint32(target.pid)] = ct.c_uint32(proc.slot)
        self._refresh(bpf, target.pid, proc)
        # polls come often for a while: threads that start meanwhile are named while they live, and a process that
        # keeps starting threads keeps them often (poll)
        self._busy_until = time.monotonic() + NEW_THREADS_BUSY_S

    def poll(self, bpf: Any, target: Target) -> None:
        missed: dict[int, set[int]] = {}
        for pid, tid, _ in self._drain(bpf, "py_misses", _value):
            missed.setdefault(pid, set()).add(tid)
        # entries the walker wrote: the family deletes them when their threads go, and reads the Python names of
        # the threads it met while they live
        found = self._drain(bpf, "py_found", lambda v: int(v.pid))
        now = time.monotonic()
        for pid, tid, value in found:
            missed.setdefault(pid, set()).add(tid)
            self._os_names.setdefault(pid, {})[tid] = bytes(value.comm).split(b"\0", 1)[0].decode(errors="replace")
            proc = self._procs.get(pid)  # none: a process no capture holds (its entries go with the program)
            if proc is not None:
                proc.threads.setdefault(tid, WALKER_OWNS)
        if found:
            self._busy_until = now + NEW_THREADS_BUSY_S
        self._sweep_unannounced(bpf)
        for pid, proc in self._procs.items():
            if pid in missed or now - proc.last_refresh >= REFRESH_S:
                self._refresh(bpf, pid, proc, missed.get(pid, set()))
        self._learn_new_stacks(bpf)
        for proc in self._procs.values():  # torch.compile's trace, for compiles since the last read
            proc.codes.compiled.refresh()

    def busy(self) -> bool:
        """Poll again soon: new stacks are being stored, and their code objects can only be read while the
        process lives (a stack first seen in the target's last moments otherwise stays [unknown]); or new threads
        came lately, whose Python names can only be read while they live."""
        return self.learning or time.monotonic() < self._busy_until

    def finish(self, bpf: Any, target: Target, exited: bool) -> None:
        """A target that exited: code objects that could not be read in its last moments were freed by its
        finalization, and their frames are [unknown] (the exit), not [code object freed]."""
        proc = self._procs.get(target.pid)
        if exited and proc is not None:
            proc.codes.exited(time.monotonic(), EXIT_GRACE_S)
        if proc is not None:  # the compiles since the last read (its root is held: also after an exit)
            proc.codes.compiled.close()

    def detach(self, bpf: Any, target: Target) -> None:
        proc = self._procs.pop(target.pid, None)
        if proc is None:
            return
        proc.codes.compiled.close()  # a capture that failed before its finish
        # its threads first, then the pid's slot, then the layout (an array's entry deleted is zeroed: pid 0)
        entries = [(bpf[b"py_threads"], ct.c_uint32(tid)) for tid in proc.threads]
        entries.append((bpf[b"py_proc_slots"], ct.c_uint32(target.pid)))
        slot = share_of(bpf).release_slot("py_procs", target.pid)
        if slot is not None:
            entries.append((bpf[b"py_procs"], ct.c_int(slot)))
        for table, key in entries:
            try:
                del table[key]
            except KeyError:
                pass
        proc.mem.close()
        self._detached[target.pid] = proc  # what its reader already named still names stacks

    def clear_window(self, bpf: Any, target: Target, stacks_free: bool) -> None:
        """Continuous mode, after a window was built: the stack map is cleared once it is half full (ids are
        hashes of the frames: stacks are interned again as they recur, names stay cached by id) and no
        capture on the program has counts left to build (stacks_free). Clearing it at every window lost the
        stacks first stored while the window was built: the next poll found their ids queued and the map
        without them."""
        stacks = bpf[b"py_stacks"]
        if stacks_free and entry_count(stacks) > self.stack_entries // 2:
            clear_stacks(stacks, bpf[b"py_stacks_gen"])

    def stats(self, bpf: Any) -> dict[str, int]:
        table = bpf[b"py_stats"]
        out = {name: percpu_sum(table, i) for i, name in STAT_NAMES.items()}
        out["python_thread_refreshes"] = self.refreshes
        out["python_thread_name_reads"] = self.name_reads
        out["python_unknown_frames"] = self.unknown_frames()
        return out

    def unknown_frames(self) -> int:
        """Frames named [unknown] in the stacks named so far (the count is final once every path is resolved)."""
        return sum(1 for frames in self._named.values() for f in frames if f.frame.name == "[unknown]")

    # -- for the call path resolver ------------------------------------------------------------------

    def frames(self, bpf: Any, target: Target | None, py_stack_id: int) -> list[PyFrameInfo]:
        """The Python frames of a stack id, outermost first ([] for an id the walker never stored)."""
        if py_stack_id in self._named:
            return self._named[py_stack_id]
        raw = self._raw.get(py_stack_id) or self._read_stack(bpf, py_stack_id)
        if raw is None:
            return []
        proc = self._proc_for(target, py_stack_id, raw)
        if proc is None:
            return []
        named = symbolize_stack(proc.codes, raw)
        self._named[py_stack_id] = named
        return named

    def os_thread_names(self, pid: int) -> dict[int, str]:
        """Host tid -> the OS name of each thread the walker met or a refresh saw (a thread gone before the capture
        read /proc keeps it)."""
        return {tid: name for tid, name in self._os_names.get(pid, {}).items() if name}

    def thread_names(self, pid: int) -> dict[int, str]:
        """Host tid -> the thread's Python name (threading.Thread's), for the threads read while the process ran."""
        proc = self._procs.get(pid) or self._detached.get(pid)
        return dict(proc.names) if proc else {}

    def compiled_sources(self, pid: int) -> CompiledSources | None:
        """The process's torch.compile wrappers and trace, as read while it ran."""
        proc = self._procs.get(pid) or self._detached.get(pid)
        return proc.codes.compiled if proc else None

    def interpreter_modules(self, pid: int) -> set[str]:
        """Basenames of the interpreter's ELF files (for merge_stacks)."""
        interp = self.interpreter(pid)
        return set(interp.modules) if interp else set()

    def interpreter(self, pid: int) -> Interpreter | None:
        proc = self._procs.get(pid) or self._detached.get(pid)
        return proc.interp if proc else None

    # -- internals -----------------------------------------------------------------------------------

    def _proc_for(self, target: Target | None, stack_id: int, raw: RawStack) -> _Proc | None:
        procs = {**self._detached, **self._procs}
        pid = target.pid if target is not None else self._owner.get(stack_id)
        if pid in procs:
            return procs[pid]
        # Without a target: the process whose reader already knows these code objects, else any.
        for proc in procs.values():
            if raw.frames and proc.codes.cached(raw.frames[0].code, raw.frames[0].tag):
                return proc
        return next(iter(procs.values()), None)

    def _read_stack(self, bpf: Any, stack_id: int) -> RawStack | None:
        try:
            value = bpf[b"py_stacks"][ct.c_uint64(stack_id)]
        except KeyError:
            return None
        raw = raw_stack(self._stack_type.from_buffer_copy(bytes(value)))
        self._raw[stack_id] = raw
        return raw

    def _drain(self, bpf: Any, name: str, pid_of: Callable[[Any], int]) -> list[tuple[int, int, Any]]:
        """(pid, tid, value) of the entries of a map keyed by tid that the walker fills, emptied: py_misses (tid ->
        pid: samples without a known or valid thread state) or py_found (entries it wrote in py_threads)."""
        table = bpf[name.encode()]
        try:
            entries = list(table.items_lookup_and_delete_batch())
        except Exception:  # kernels without batch ops: one syscall per entry
            entries = list(table.items())
            for k, _ in entries:
                try:
                    del table[k]
                except KeyError:
                    pass
        # the program's other captures get theirs at their next poll (probes/program_share.py)
        share = share_of(bpf)
        return share.route(name, [(pid_of(v), (pid_of(v), _value(k), v)) for k, v in entries], self._procs)

    def _refresh(self, bpf: Any, pid: int, proc: _Proc, missed: AbstractSet[int] = frozenset()) -> None:
        """Writes host tid -> thread state for every thread of the process (0 for threads without one);
        entries of threads that missed are written again even if unchanged."""
        proc.last_refresh = time.monotonic()
        self.refreshes += 1
        try:
            states: dict[int, ThreadState] = proc.mapper.snapshot()
            tids = thread_ids(pid)
        except (MemoryError, ProcessGone) as e:  # exiting, or caught mid-update: the next poll retries
            log.debug("thread states unreadable", extra={"pid": pid, "error": str(e)})
            return
        if not proc.searching:
            self._start_search(bpf, proc)
        names = self._os_names.setdefault(pid, {})
        for tid in tids:  # read once per thread, while it lives (the walker reads those it meets itself)
            if tid not in names:
                names[tid] = thread_name(pid, tid) or ""
        table = bpf[b"py_threads"]
        retry_at = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + PY_RETRY_NS  # bpf_ktime_get_ns's clock
        changed = False
        for tid in tids:
            st = states.get(tid)
            old = proc.threads.get(tid)
            if st is None and proc.searching:
                # the walker looks for it itself, and retries soon: an entry from here would hold it back
                if old is not None and old[0] > 0:  # a state written here is gone
                    try:
                        del table[ct.c_uint32(tid)]
                    except KeyError:
                        pass
                    changed = True
                proc.threads[tid] = WALKER_OWNS
                continue
            want = (st.tstate, st.ident) if st else (0, 0)
            if old == want and tid not in missed:
                continue
            changed = changed or old != want
            value = want if st else (0, retry_at)
            table[ct.c_uint32(tid)] = table.Leaf.from_buffer_copy(bytes(PyThread(*value, proc.slot)))
            proc.threads[tid] = want
        for tid in set(proc.threads) - set(tids):
            try:
                del table[ct.c_uint32(tid)]
            except KeyError:
                pass
            del proc.threads[tid]
            changed = True
        if changed:
            proc.name_reads_left = NAME_RETRIES
        if proc.name_reads_left:
            self._read_names(proc, states)

    def _start_search(self, bpf: Any, proc: _Proc) -> None:
        """Lets the walker search the main interpreter's thread list once it is known: the interpreter exists,
        and (3.10) where struct pthread holds the thread id was found."""
        lay = proc.interp.layout
        ident_tid = proc.mapper.pthread_tid_offset if lay.ident_is_pthread else PY_NO_OFFSET
        if ident_tid is None:
            return
        try:
            main = main_interpreter(proc.mem, proc.interp)
        except (MemoryError, ProcessGone):
            return
        if main:
            proc.cfg.ident_tid = ident_tid
            proc.cfg.threads_head = main + lay.interp_threads_head
            self._write_proc(bpf, proc)

    @staticmethod
    def _write_proc(bpf: Any, proc: _Proc) -> None:
        table = bpf[b"py_procs"]
        table[ct.c_int(proc.slot)] = table.Leaf.from_buffer_copy(bytes(proc.cfg))

    def _read_names(self, proc: _Proc, states: dict[int, ThreadState]) -> None:
        """The threads' Python names, read from threading._active ({} without the threading module)."""
        self.name_reads += 1
        try:
            proc.names.update(read_thread_names(proc.mem, proc.interp, states))
        # caught mid-update (garbage pointers, sizes) or exiting: read at the next change
        except (MemoryError, OSError, ProcessGone, ValueError, OverflowError) as e:
            log.debug("thread names unreadable", extra={"pid": proc.interp.pid, "error": str(e)})
        unnamed = any(tid not in proc.names for tid in states)
        proc.name_reads_left = proc.name_reads_left - 1 if unnamed else 0

    def _learn_new_stacks(self, bpf: Any) -> None:
        """Reads the code objects of stacks stored since the last poll while their process lives."""
        queue = bpf[b"py_new_stacks"]
        popped: list[tuple[int, tuple[int, int | None]]] = []
        while True:
            try:
                leaf = queue.pop()
            except KeyError:
                break
            popped.append((int(leaf.pid), (int(leaf.id), int(leaf.pid))))
        # another capture's stacks wait for its own poll, which reads them from its process's memory
        share = share_of(bpf)
        fresh: list[tuple[int, int | None]] = share.route("py_new_stacks", popped, self._procs)
        if self._queue_overflowed(bpf):  # some ids never made it to the queue: look at them all
            fresh += [(k.value, None) for k in bpf[b"py_stacks"].keys() if k.value not in self._raw]
        self.learning = bool(fresh)
        for stack_id, pid in fresh:
            raw = self._raw.get(stack_id) or self._read_stack(bpf, stack_id)
            if raw is None or not raw.frames:
                continue
            if pid is not None and pid in self._procs:
                self._owner.setdefault(stack_id, pid)
            proc = self._proc_for(None, stack_id, raw)
            if proc is not None:
                prefetch(proc.codes, raw)
                self._owner.setdefault(stack_id, proc.interp.pid)

    def _sweep_unannounced(self, bpf: Any) -> None:
        """py_found was full when the walker wrote some entries (counted): they are looked for in py_threads, so
        that those of this family's processes are deleted with their threads (else they stay until detach)."""
        lost = percpu_sum(bpf[b"py_stats"], PYSTACK_STAT_FOUND_LOST)
        if lost == self._found_lost_seen:
            return
        self._found_lost_seen = lost
        slots = {proc.slot: proc for proc in self._procs.values()}
        for key, value in list(bpf[b"py_threads"].items()):
            proc = slots.get(int(value.proc_slot))
            if proc is not None:
                proc.threads.setdefault(_value(key), WALKER_OWNS)  # deleted by a refresh once the thread is gone

    def _queue_overflowed(self, bpf: Any) -> bool:
        lost = percpu_sum(bpf[b"py_stats"], PYSTACK_STAT_NEW_LOST)
        if lost != self._lost_seen:
            self._lost_seen = lost
            return True
        return False
