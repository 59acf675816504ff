"""probes/maps.raw_items on a real BPF hash map: every entry once, as its key's and value's bytes, across
several batch syscalls, and key by key when a batch cannot hold a hash bucket. CountsMap's two generations
(probes/counts_map.bpf.h) on a real tracepoint: a take moves the programs to the other one, and counts are
conserved across takes made without pause."""

from __future__ import annotations

import ctypes as ct
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from deepctx.probes import maps

ENTRIES = 10_000  # more than two batches of maps.RAW_BATCH (4096)
SOURCE = """
struct key_t { u32 pid; u32 pad; u64 id; };
struct val_t { u64 count; u64 time_ns; };
BPF_HASH(counts, struct key_t, struct val_t, 16384);
"""


def filled_map() -> Iterator[Any]:
    from bcc import BPF

    bpf = BPF(text=SOURCE.encode())
    t = bpf[b"counts"]
    for i in range(ENTRIES):
        k = t.Key()
        k.pid, k.id = 7 + i % 3, 0x1000 + i
        t[k] = t.Leaf(i, 3 * i + 1)
    yield t
    bpf.cleanup()


@pytest.fixture(scope="module")
def table() -> Iterator[Any]:
    yield from filled_map()


def decoded(entries: list[tuple[bytes, bytes]]) -> dict[tuple[int, int], tuple[int, int]]:
    out = {}
    for k, v in entries:
        pid, _pad, ident = struct.unpack("<IIQ", k)
        out[(pid, ident)] = struct.unpack("<QQ", v)
    return out


def test_every_entry_comes_once_as_bytes_over_several_batches(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table, "items", lambda: pytest.fail("read key by key, not in batches"))
    got = maps.raw_items(table)
    assert len(got) == ENTRIES
    assert all(isinstance(k, bytes) and len(k) == ct.sizeof(table.Key) and len(v) == ct.sizeof(table.Leaf)
               for k, v in got)
    want = {(7 + i % 3, 0x1000 + i): (i, 3 * i + 1) for i in range(ENTRIES)}
    assert decoded(got) == want
    monkeypatch.undo()
    assert sorted(got) == sorted((bytes(k), bytes(v)) for k, v in table.items())


def test_a_batch_smaller_than_a_hash_bucket_reads_key_by_key(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One entry a batch: the kernel refuses any bucket holding two (ENOSPC), so the map is read key by
    key, with the same result."""
    monkeypatch.setattr(maps, "RAW_BATCH", 1)
    key_by_key = []
    items = table.items
    monkeypatch.setattr(table, "items", lambda: key_by_key.append(1) or items())
    got = maps.raw_items(table)
    assert key_by_key == [1]
    assert len(got) == ENTRIES
    assert decoded(got) == {(7 + i % 3, 0x1000 + i): (i, 3 * i + 1) for i in range(ENTRIES)}


@pytest.fixture
def fresh_table() -> Iterator[Any]:
    """A map of its own per test: taking empties it."""
    yield from filled_map()


def test_taking_reads_every_entry_once_and_leaves_the_map_empty(fresh_table: Any) -> None:
    got = maps.take_raw_items(fresh_table)
    assert decoded(got) == {(7 + i % 3, 0x1000 + i): (i, 3 * i + 1) for i in range(ENTRIES)}
    assert len(got) == ENTRIES
    assert maps.entry_count(fresh_table) == 0
    k = fresh_table.Key()
    k.pid, k.id = 9, 42
    fresh_table[k] = fresh_table.Leaf(5, 6)  # what comes after the take is all the next take sees
    assert decoded(maps.take_raw_items(fresh_table)) == {(9, 42): (5, 6)}


def test_taking_falls_back_key_by_key_without_losing_what_a_batch_took(fresh_table: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of one entry: the kernel takes single-entry buckets, then refuses one holding two (ENOSPC);
    the rest is read and deleted key by key, and the entries the batches took are kept."""
    monkeypatch.setattr(maps, "RAW_BATCH", 1)
    got = maps.take_raw_items(fresh_table)
    assert len(got) == ENTRIES
    assert decoded(got) == {(7 + i % 3, 0x1000 + i): (i, 3 * i + 1) for i in range(ENTRIES)}
    assert maps.entry_count(fresh_table) == 0


COUNTING = """
#include "counts_map.bpf.h"
BPF_HASH(targets, u32, u8, 64);
COUNTS_MAP(counts, u32, u64, 1024, SPARE, FLAGS);
TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!targets.lookup(&tgid))
        return 0;
    u64 zero = 0;
    int slot = 0;
    u64 *n = counts_get(counts.lookup(&slot), &tgid, &zero);
    if (n)
        __sync_fetch_and_add(n, 1);
    return 0;
}
"""


def counting(windows: bool, pids: list[int], flags: str = "0") -> Any:
    """getppid() calls of the processes pids, counted per process in a two-generation counts map
    (probes/counts_map.bpf.h) with those map flags."""
    from bcc import BPF

    from deepctx.probes.family import PROBES_DIR

    bpf = BPF(text=COUNTING.encode(), cflags=[f"-I{PROBES_DIR}", f"-DSPARE={1024 if windows else 1}",
                                          f"-DFLAGS={flags}"])
    for pid in pids:
        bpf[b"targets"][ct.c_uint32(pid)] = ct.c_uint8(1)
    return bpf


def per_pid(entries: list[tuple[Any, Any]]) -> dict[int, int]:
    return {k.value: v.value for k, v in entries}


def test_a_take_moves_the_programs_to_the_other_generation_and_reads_the_old_one_until_released() -> None:
    bpf = counting(windows=True, pids=[os.getpid()])
    try:
        counts = maps.CountsMap("counts", windows=True)
        for _ in range(5):
            os.getppid()
        assert per_pid(counts.items(bpf)) == {}  # not bound yet: the programs find no map
        counts.bind(bpf)
        for _ in range(7):
            os.getppid()
        assert per_pid(counts.items(bpf)) == {os.getpid(): 7}
        counts.take(bpf)
        assert counts.generation(bpf) == 1
        for _ in range(3):
            os.getppid()  # counted while the window is built: the next window's
        assert per_pid(counts.items(bpf)) == {os.getpid(): 7}  # the taken window
        assert maps.entry_count(bpf[b"counts_0"]) == 0  # emptied as it was read
        assert per_pid(maps.decoded(bpf[b"counts_1"], maps.raw_items(bpf[b"counts_1"]))) == {os.getpid(): 3}
        counts.release()
        assert per_pid(counts.items(bpf)) == {os.getpid(): 3}
        counts.bind(bpf)  # bound already: stays on generation 1
        os.getppid()
        assert per_pid(counts.items(bpf)) == {os.getpid(): 4}
        counts.take(bpf)
        assert counts.generation(bpf) == 0 and per_pid(counts.items(bpf)) == {os.getpid(): 4}
    finally:
        bpf.cleanup()


def test_without_windows_the_second_generation_has_one_entry_and_nothing_is_taken() -> None:
    bpf = counting(windows=False, pids=[os.getpid()])
    try:
        assert bpf[b"counts_1"].max_entries == 1  # a one-shot capture pays no second map
        counts = maps.CountsMap("counts")
        counts.bind(bpf)
        for _ in range(6):
            os.getppid()
        with pytest.raises(RuntimeError, match="cuts no windows"):
            counts.take(bpf)
        assert counts.generation(bpf) == 0 and per_pid(counts.items(bpf)) == {os.getpid(): 6}
    finally:
        bpf.cleanup()


CALLS = 400_000


def counted_across_takes(windows: bool, flags: str = "0") -> tuple[int, list[int]]:
    """Two processes make CALLS getppid() calls each, as fast as they can, while windows are taken one after
    another (by CountsMap.take, or without windows the old way: read and deleted in batches from under the
    programs): how many takes there were, and each process's calls counted over all windows, less CALLS."""
    loop = f"import os, sys\nsys.stdin.readline()\nfor _ in range({CALLS}): os.getppid()\n"
    procs = [subprocess.Popen([sys.executable, "-c", loop], stdin=subprocess.PIPE) for _ in range(2)]
    try:
        bpf = counting(windows=windows, pids=[p.pid for p in procs], flags=flags)
    except BaseException:
        for p in procs:
            p.kill()
            p.wait()
        raise
    try:
        counts = maps.CountsMap("counts", windows=windows)
        counts.bind(bpf)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.close()
        total: dict[int, int] = {}
        takes = 0
        while any(p.poll() is None for p in procs):
            if windows:
                counts.take(bpf)
                window = counts.items(bpf)
                counts.release()
            else:
                window = maps.decoded(bpf[b"counts_0"], maps.take_raw_items(bpf[b"counts_0"]))
            takes += 1
            for pid, n in per_pid(window).items():
                total[pid] = total.get(pid, 0) + n
        for p in procs:
            assert p.wait() == 0
        for pid, n in per_pid(counts.items(bpf)).items():
            total[pid] = total.get(pid, 0) + n
        return takes, [total.get(p.pid, 0) - CALLS for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
        bpf.cleanup()


@pytest.mark.parametrize("flags", ["0", "BPF_F_NO_PREALLOC"])
def test_every_call_is_counted_once_across_takes_made_while_processes_call_without_pause(flags: str) -> None:
    """Each take waits for the programs to leave the old generation (synchronize_rcu: about 8 ms here), so
    there are few of them; none loses a call or counts one twice. Preallocated (the CPU sampler's) or
    allocated as keys appear (the GPU families' where windows are cut) alike."""
    takes, off = counted_across_takes(windows=True, flags=flags)
    assert takes >= 3, takes  # the calls spanned several cuts
    assert off == [0, 0], (takes, off)


def test_the_control_taking_from_under_the_programs_loses_calls() -> None:
    """The control: one generation, read and deleted in batches while the programs add to it (what window
    cuts did before). Taken back to back (thousands of takes), it loses calls: on the development VM 1,900
    to 2,800 of each process's 400,000 in every run."""
    takes, off = counted_across_takes(windows=False)
    assert takes > 1000, takes
    assert all(n < 0 for n in off), (takes, off)
