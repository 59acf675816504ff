"""probes/maps.raw_items on a real BPF hash map: every entry once, as its key's and value's bytes, across
several batch syscalls, and key by key when a batch cannot hold a hash bucket."""

from __future__ import annotations

import ctypes as ct
import struct
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

    bpf = BPF(text=SOURCE)
    t = bpf["counts"]
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


def test_a_counts_map_reads_what_was_taken_until_released(fresh_table: Any) -> None:
    counts = maps.CountsMap("counts")
    bpf = {"counts": fresh_table}
    counts.take(bpf)
    k = fresh_table.Key()
    k.pid, k.id = 9, 42
    fresh_table[k] = fresh_table.Leaf(5, 6)  # counted while the window is built: the next window's
    assert len(counts.raw(bpf)) == ENTRIES
    first = counts.items(bpf)[0]
    assert isinstance(first[0], fresh_table.Key) and isinstance(first[1], fresh_table.Leaf)
    counts.release()
    assert [(k.pid, k.id, v.count) for k, v in counts.items(bpf)] == [(9, 42, 5)]
