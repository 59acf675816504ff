"""Reading BPF maps from user space."""

from __future__ import annotations

from typing import Any


def items(table: Any) -> list[tuple[Any, Any]]:
    """All entries of a hash map: one batch syscall where the kernel has it (5.6+), else key by key."""
    try:
        return list(table.items_lookup_batch())
    except Exception:
        return list(table.items())


def percpu_sum(table: Any, index: int) -> int:
    import ctypes as ct

    return int(sum(table[ct.c_int(index)]))
