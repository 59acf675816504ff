"""probes/program_share.py: what captures on one loaded program coordinate. Windows are cut at the same
instants for all of them; the first to reach a cut flips the count map's generation and reads it, each takes
its own entries, and the stack maps may be emptied only once every user built its windows."""

from __future__ import annotations

import struct

import pytest

from deepctx.probes.program_share import ProgramShare, pid_of


def entry(pid: int, n: int) -> tuple[bytes, bytes]:
    return struct.pack("<IIQ", pid, pid + 1, n), struct.pack("<Q", n)


class Generations:
    """A count map's generations: entries added since the last flip, read and emptied by a flip."""

    def __init__(self) -> None:
        self.current: list[tuple[bytes, bytes]] = []
        self.flips = 0

    def add(self, pid: int, n: int) -> None:
        self.current.append(entry(pid, n))

    def flip_and_read(self) -> list[tuple[bytes, bytes]]:
        self.flips += 1
        out, self.current = self.current, []
        return out


def counts(entries: list[tuple[bytes, bytes]]) -> list[tuple[int, int]]:
    return [(pid_of(k), struct.unpack("<Q", v)[0]) for k, v in entries]


def test_the_first_user_at_a_cut_reads_for_all_and_each_takes_its_own() -> None:
    share, gen = ProgramShare(), Generations()
    share.join(11)
    share.join(22)
    gen.add(11, 1)
    gen.add(22, 2)
    gen.add(33, 3)  # a process no capture holds now: dropped
    assert counts(share.take("counts", 5, 11, gen.flip_and_read)) == [(11, 1)]
    gen.add(22, 4)  # after the cut: the next window's
    assert counts(share.take("counts", 5, 22, gen.flip_and_read)) == [(22, 2)]
    assert gen.flips == 1  # one flip at a cut, for every user
    # the other map of the family at the same cut: flipped once more, for its own generations
    other = Generations()
    other.add(22, 9)
    assert counts(share.take("gpu_counts", 5, 11, other.flip_and_read)) == []
    assert counts(share.take("gpu_counts", 5, 22, other.flip_and_read)) == [(22, 9)]
    assert other.flips == 1  # each map flipped once at the cut
    assert share.done(11, 5) is False  # 22 has not built window 5 yet: its stacks must stay
    assert share.done(22, 5) is True
    assert counts(share.take("counts", 6, 22, gen.flip_and_read)) == [(22, 4)]


def test_a_user_that_passed_a_cut_takes_the_windows_it_missed_and_a_leaving_one_the_rest() -> None:
    share, gen = ProgramShare(), Generations()
    for pid in (11, 22):
        share.join(pid)
    gen.add(22, 1)
    share.take("counts", 1, 11, gen.flip_and_read)
    gen.add(22, 2)
    share.take("counts", 2, 11, gen.flip_and_read)
    gen.add(22, 3)
    # 22's build ran past cuts 1 and 2: at cut 3 it takes them all, in order
    assert counts(share.take("counts", 3, 22, gen.flip_and_read)) == [(22, 1), (22, 2), (22, 3)]
    assert share.done(22, 3) is False and share.done(11, 3) is True
    gen.add(22, 4)
    share.take("counts", 4, 11, gen.flip_and_read)
    assert counts(share.rest("counts", 22)) == [(22, 4)]  # its capture ends before its own cut 4
    assert counts(share.rest("counts", 22)) == [(22, 4)]  # read again alike: a read takes nothing
    assert share.done(11, 4) is False
    share.leave(22)
    assert share.rest("counts", 22) == []
    assert share.done(11, 4) is True and share.users == {11}


def test_queued_items_reach_their_own_user() -> None:
    share = ProgramShare()
    share.join(11)
    share.join(22)
    assert share.route("py_new_stacks", [(11, "a"), (22, "b"), (99, "c")], {11}) == ["a", "c"]
    assert share.route("py_new_stacks", [(22, "d")], {22}) == ["b", "d"]
    share.leave(11)
    assert share.route("py_new_stacks", [(11, "e")], {22}) == ["e"]  # no capture holds 11: the caller's
    share.reset()
    assert (share.users, share.route("py_misses", [(22, 1)], {11})) == (set(), [1])


def test_slots_are_the_lowest_free_one_per_process_and_refused_when_full() -> None:
    share = ProgramShare()
    assert [share.claim_slot("py_procs", pid, 3) for pid in (40, 41, 40)] == [0, 1, 0]
    assert share.release_slot("py_procs", 40) == 0 and share.release_slot("py_procs", 40) is None
    assert [share.claim_slot("py_procs", pid, 3) for pid in (42, 43)] == [0, 2]
    with pytest.raises(ValueError, match="more than 3 processes on one program"):
        share.claim_slot("py_procs", 44, 3)
    assert share.claim_slot("other", 44, 3) == 0  # each array its own slots
