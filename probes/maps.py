"""Reading BPF maps from user space."""

from __future__ import annotations

import ctypes as ct
import errno
from typing import Any

RAW_BATCH = 4096  # entries a lookup-batch syscall returns at most (raw_items)


def items(table: Any) -> list[tuple[Any, Any]]:
    """All entries of a hash map: one batch syscall where the kernel has it (5.6+), else key by key."""
    try:
        return list(table.items_lookup_batch())
    except Exception:
        return list(table.items())


def raw_items(table: Any) -> list[tuple[bytes, bytes]]:
    """All entries of a hash map as (key bytes, value bytes), for readers that decode with struct: one
    batch syscall per RAW_BATCH entries into two flat buffers, sliced, where bcc's own batch read builds two
    ctypes objects per entry (which bytes() then copies) in arrays of the map's full size. Key by key where
    the kernel has no batch lookup (before 5.6) or a batch fails."""
    from bcc.libbcc import lib

    ks, vs = ct.sizeof(table.Key), ct.sizeof(table.Leaf)
    keys, values = ct.create_string_buffer(ks * RAW_BATCH), ct.create_string_buffer(vs * RAW_BATCH)
    token, count = ct.c_uint32(0), ct.c_uint32(0)
    out: list[tuple[bytes, bytes]] = []
    first = True
    while True:
        count.value = RAW_BATCH
        res = lib.bpf_lookup_batch(table.map_fd, None if first else ct.byref(token), ct.byref(token),
                                   keys, values, ct.byref(count))
        err = ct.get_errno()
        if res != 0 and err != errno.ENOENT:  # no batch ops here, or a hash bucket over RAW_BATCH (ENOSPC)
            return [(bytes(k), bytes(v)) for k, v in table.items()]
        n = count.value
        kb, vb = keys.raw[:n * ks], values.raw[:n * vs]
        out.extend((kb[i * ks:(i + 1) * ks], vb[i * vs:(i + 1) * vs]) for i in range(n))
        if res != 0:  # ENOENT: that was the last of them
            return out
        first = False


def percpu_sum(table: Any, index: int) -> int:
    return int(sum(table[ct.c_int(index)]))
