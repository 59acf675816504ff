"""Which stats counters count lost or dropped events: one definition for status, metrics and the store."""

from __future__ import annotations

from collections.abc import Mapping

# The stats counters of events lost or dropped (probes/*.py stats(), daemon/device_tree.py), beyond those
# whose name says "lost" or "dropped". Not counted: the native unwinder's `store_failed` (each failure is
# counted again as cpu_user_stacks_lost or gpu_api_stacks_lost) and the unwind tables' `table_*_dropped`
# (rows of unwind tables that did not fit, not events).
LOST_COUNTERS = ("python_stack_map_full", "device_batches_cut")


def is_lost_counter(name: str) -> bool:
    return name in LOST_COUNTERS or (("lost" in name or "dropped" in name) and not name.startswith("table_"))


def lost_counters(stats: Mapping[str, object], *, zeros: bool = False) -> dict[str, int]:
    """Every integer counter of lost or dropped events in a capture's stats, by name; those at zero too with
    `zeros` (metrics keep a series per counter from the start)."""
    return {k: int(v) for k, v in sorted(stats.items())
            if isinstance(v, int) and not isinstance(v, bool) and (v or zeros) and is_lost_counter(k)}
