"""One loaded program shared by the captures that run on it at once (#30: continuous mode's processes).

Continuous mode profiles every GPU process of the host, each in a capture of its own, all with the same
options: each used to compile and load a program of its own (4.3 to 7.2 CPU-s a process on the H200 host,
about 250 MB of kernel memory each). Captures of one kind now attach to one loaded program (the pool hands it
to each: probes/programs.py), and coordinate here what the program holds for all of them:

- its users (the pids captured on it) and its CPU sampler's perf events (opened by the first, closed by the
  last: every CPU's event runs the program for every target in its `targets` map);
- the generation its count maps add to (probes/maps.py CountsMap);
- the windows' cuts. Windows are cut at the same instants for every capture of the program (a window apart
  from the first windowed capture's start, on CLOCK_MONOTONIC: anchor(), daemon/capture.py), so the first capture to reach a cut flips the generation and
  reads the old one whole, and what belongs to each user waits here until that user takes it;
- when the stack maps may be emptied: only once every user has built the windows cut so far, since counts
  still to be built name their stacks by id;
- what a user's poll drains from the program's shared queues (new Python stacks, threads without a state)
  for another user.

A program that one capture holds has one user: the same steps, none of them waiting for another.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

RawEntry = tuple[bytes, bytes]


def pid_of(key: bytes) -> int:
    """The pid of a count map's key: every family's count key starts with the process's u32 pid."""
    return int.from_bytes(key[:4], "little")


class ProgramShare:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users: set[int] = set()
        self.perf_users = 0  # captures whose sampling holds the program's perf events open
        self.generations: dict[str, int] = {}  # count map -> the generation its programs add to
        self._taken: dict[tuple[str, int], dict[int, list[RawEntry]]] = {}  # (map, cut) -> pid -> its entries
        self._pending: dict[int, set[int]] = {}  # cut -> users yet to build its window
        self._routed: dict[str, dict[int, list[Any]]] = {}  # queue -> pid -> what another user drained for it
        self.stack_clears = 0  # times the users were free to empty the stack maps: stack ids read before name none
        self.window_anchor: float | None = None  # CLOCK_MONOTONIC instant its windows are counted from
        self.slots: dict[str, dict[int, int]] = {}  # array of per-process entries -> pid -> its slot

    # --- users -----------------------------------------------------------------------------------------

    def join(self, pid: int) -> None:
        with self.lock:
            self.users.add(pid)

    def claim_slot(self, array: str, pid: int, size: int) -> int:
        """The slot of pid in one of the program's arrays of per-process entries (the lowest free one)."""
        with self.lock:
            taken = self.slots.setdefault(array, {})
            if pid not in taken:
                free = set(range(size)) - set(taken.values())
                if not free:
                    raise ValueError(f"more than {size} processes on one program ({array} is full)")
                taken[pid] = min(free)
            return taken[pid]

    def release_slot(self, array: str, pid: int) -> int | None:
        with self.lock:
            return self.slots.get(array, {}).pop(pid, None)

    def leave(self, pid: int) -> None:
        """The capture of pid is over: nothing more is kept for it."""
        with self.lock:
            self.users.discard(pid)
            for taken in self._taken.values():
                taken.pop(pid, None)
            for routed in self._routed.values():
                routed.pop(pid, None)
            self.done(pid, None)

    def reset(self) -> None:
        """The program goes back to the pool with its maps emptied."""
        with self.lock:
            self.users.clear()
            self.perf_users = 0
            self.generations.clear()
            self._taken.clear()
            self._pending.clear()
            self._routed.clear()
            self.stack_clears = 0
            self.window_anchor = None

    # --- windows ----------------------------------------------------------------------------------------

    def anchor(self, t: float) -> float:
        """The instant the program's window cuts are counted from: the start of the first windowed capture
        on it (its windows are then as long as asked, as they were before programs were shared); a capture
        that joins later cuts at the same instants, its first window ending at the next of them."""
        with self.lock:
            if self.window_anchor is None:
                self.window_anchor = t
            return self.window_anchor

    def take(self, name: str, cut: int, pid: int, flip_and_read: Callable[[], list[RawEntry]]) -> list[RawEntry]:
        """pid's entries of count map `name` up to window cut `cut`. The first user at a cut flips the map's
        generation and reads the old one (flip_and_read); the entries are kept by pid for the users then
        captured, and each takes its own (with those of earlier cuts it has not taken: a build that ran past
        a cut)."""
        with self.lock:
            if (name, cut) not in self._taken:
                by_pid: dict[int, list[RawEntry]] = {p: [] for p in self.users}
                for entry in flip_and_read():
                    owner = by_pid.get(pid_of(entry[0]))
                    if owner is not None:  # a process no capture holds any more: dropped
                        owner.append(entry)
                self._taken[(name, cut)] = by_pid
                self._pending.setdefault(cut, set(self.users))
            out: list[RawEntry] = []
            for (map_name, c), taken in sorted(self._taken.items(), key=lambda kv: kv[0][1]):
                if map_name == name and c <= cut:
                    out += taken.pop(pid, [])
            self._taken = {k: v for k, v in self._taken.items() if v}
            return out

    def rest(self, name: str, pid: int) -> list[RawEntry]:
        """pid's entries of `name` taken at cuts it has not built (its capture ends between a cut and its
        own window's build): they go into its last profile, with what the map holds for it now. Read, not
        taken: leave() forgets them."""
        with self.lock:
            return [e for (map_name, c), taken in sorted(self._taken.items(), key=lambda kv: kv[0][1])
                    if map_name == name for e in taken.get(pid, [])]

    def done(self, pid: int, cut: int | None) -> bool:
        """pid has built its windows up to `cut` (None: all). True when no user has a window left to build:
        the stack maps may then be emptied, as no count waiting for a build names their ids."""
        with self.lock:
            for c in list(self._pending):
                if cut is None or c <= cut:
                    self._pending[c].discard(pid)
                    if not self._pending[c]:
                        del self._pending[c]
            return not self._pending

    def cleared(self) -> None:
        """A user was free to empty the stack maps (done() said so): every user forgets the stack ids it
        resolved ahead."""
        with self.lock:
            self.stack_clears += 1

    # --- queues -----------------------------------------------------------------------------------------

    def route(self, queue: str, items: list[tuple[int, Any]], pids: Iterable[int]) -> list[Any]:
        """Items drained from a queue of the program, each (its pid, item): another user's are kept for it;
        returns those of pids (the caller's), with those another user drained for them. Items of a pid no
        capture holds go to the caller (a program without users: a test's own)."""
        with self.lock:
            routed = self._routed.setdefault(queue, {})
            own = set(pids)
            mine = [item for pid in own for item in routed.pop(pid, [])]
            for owner, item in items:
                if owner in self.users and owner not in own:
                    routed.setdefault(owner, []).append(item)
                else:
                    mine.append(item)
            return mine


def bind_share(bpf: Any, share: ProgramShare) -> None:
    """Keeps the share with its program (as the native unwinder keeps its table space, as an attribute)."""
    bpf.deepctx_share = share


def share_of(bpf: Any) -> ProgramShare:
    """The program's share (made by the pool, probes/programs.py; one of its own for a program made
    elsewhere, as tests do)."""
    share = getattr(bpf, "deepctx_share", None)
    if share is None:
        share = ProgramShare()
        bind_share(bpf, share)
    return share
