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


@pytest.fixture(scope="module")
def table() -> Iterator[Any]:
    from bcc import BPF

    bpf = BPF(text=SOURCE)
    t = bpf["counts"]
    for i in range(ENTRIES):
        k = t.Key()
        k.pid, k.id = 7 + i % 3, 0x1000 + i
        t[k] = t.Leaf(i, 3 * i + 1)
    yield t
    bpf.cleanup()


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
