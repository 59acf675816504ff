"""Thread states: walking `interp -> threads` in a target and mapping each PyThreadState to the
native thread (host tid) it belongs to."""

from __future__ import annotations

import os
from dataclasses import dataclass

from deepctx.host.procfs import ProcessMemory
from deepctx.host.python.discovery import Interpreter

MAX_INTERPRETERS = 64
MAX_THREADS = 65536
GLIBC_PTHREAD_TID = 720  # offsetof(struct pthread, tid), glibc x86-64: tried first, else searched for


@dataclass(frozen=True)
class ThreadState:
    tstate: int
    ident: int  # the u64 at tstate + layout.tstate_ident, which the BPF walker checks


def walk_thread_states(mem: ProcessMemory, interp: Interpreter) -> list[ThreadState]:
    """Every thread state of every interpreter, newest first. Raises MemoryError if unreadable."""
    lay = interp.layout
    out: list[ThreadState] = []
    seen: set[int] = set()
    istate = mem.read_u64(interp.runtime + lay.runtime_interpreters_head)
    for _ in range(MAX_INTERPRETERS):
        if not istate:
            break
        ts = mem.read_u64(istate + lay.interp_threads_head)
        while ts and ts not in seen and len(seen) < MAX_THREADS:
            seen.add(ts)
            out.append(ThreadState(ts, mem.read_u64(ts + lay.tstate_ident)))
            ts = mem.read_u64(ts + lay.tstate_next)
        istate = mem.read_u64(istate + lay.interp_next)
    return out


def main_interpreter(mem: ProcessMemory, interp: Interpreter) -> int:
    """The main interpreter's address: the oldest (new ones are pushed at the list's head); 0 before the runtime
    has one. Raises MemoryError if unreadable."""
    lay = interp.layout
    istate = mem.read_u64(interp.runtime + lay.runtime_interpreters_head)
    main = 0
    for _ in range(MAX_INTERPRETERS):
        if not istate:
            break
        main = istate
        istate = mem.read_u64(istate + lay.interp_next)
    return main


def namespace_tids(pid: int) -> dict[int, int]:
    """Thread id as the target sees it (innermost pid namespace) -> host tid."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        host = int(t)
        inner = host
        try:
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        inner = int(line.split()[-1])
                        break
        except OSError:
            continue
        out[inner] = host
    return out


def _pthread_tid(mem: ProcessMemory, pthread: int, offset: int) -> int | None:
    data = mem.read_up_to(pthread + offset, 4)
    return int.from_bytes(data, "little") if len(data) == 4 else None


def find_pthread_tid_offset(mem: ProcessMemory, pthreads: list[int], tids: set[int]) -> int | None:
    """Where glibc's struct pthread keeps the kernel tid (3.10 records only pthread_self()): the
    offset at which the most threads' structs hold one of the process's tids (an exited thread's
    struct may be gone, so not necessarily all). glibc's offset wins ties, and is taken at once when it
    holds a tid for every thread (no other offset can score more)."""

    def score(off: int) -> int:
        return sum(_pthread_tid(mem, p, off) in tids for p in pthreads)

    best_score = score(GLIBC_PTHREAD_TID)
    if pthreads and best_score == len(pthreads):
        return GLIBC_PTHREAD_TID
    best = GLIBC_PTHREAD_TID if best_score else None
    for off in range(0, 2048, 4):
        if off == GLIBC_PTHREAD_TID:
            continue  # scored above
        s = score(off)
        if s > best_score:
            best, best_score = off, s
    return best


class ThreadMapper:
    """host tid -> thread state, refreshed on demand."""

    def __init__(self, mem: ProcessMemory, interp: Interpreter) -> None:
        self.mem = mem
        self.interp = interp
        self._pthread_off: int | None = None

    @property
    def pthread_tid_offset(self) -> int | None:
        """Where struct pthread holds the thread's id (3.10's ident is a pthread_t), once a snapshot found it."""
        return self._pthread_off

    def snapshot(self) -> dict[int, ThreadState]:
        states = walk_thread_states(self.mem, self.interp)
        ns = namespace_tids(self.interp.pid)
        out: dict[int, ThreadState] = {}
        if not self.interp.layout.ident_is_pthread:
            for s in states:
                host = ns.get(s.ident)
                if host is not None:
                    out[host] = s
            return out
        live = [s for s in states if s.ident]
        if self._pthread_off is None or not any(_pthread_tid(self.mem, s.ident, self._pthread_off) in ns for s in live):
            self._pthread_off = find_pthread_tid_offset(self.mem, [s.ident for s in live], set(ns))
        if self._pthread_off is None:
            return out
        for s in live:
            host = ns.get(_pthread_tid(self.mem, s.ident, self._pthread_off) or -1)
            if host is not None:
                out[host] = s
        return out
