"""A continuous capture's stats, window by window, as what each window added.

A continuous capture cuts a window every `continuous_window_s`: the call-path counts restart from zero
(each family's take_window takes them out of the maps), but the probes' stats counters do not. Those are
running totals for the whole capture: the BPF stats maps (cpu_stats, gpu_stats, dev_stats, py_stats,
native_unwind_stats) and the families' own counters (gpu_probe_resumes, gpu_stack_map_clears,
python_thread_refreshes, device_agent_flushes, the unwind tables' table_* ...). Summed over a capture's windows they overcount
(three windows at 10, 25 and 40 calls are 40 calls, not 75). Continuous mode stores each window's stats
through `WindowDeltas`: running totals become what the window added, so that every stat of a stored window
adds up across windows (merge.Merger) and across captures, like the window's call-path counts do.

Not running totals, kept as they are:
- PER_WINDOW: what capture._build computes from the window's own counts and shares;
- merge.SHARES: shares of the window (weighted by its length when merged);
- merge.LEVELS: sizes and states (the largest when merged).
Every other integer stat is taken for a running total: the probes' stats are counters of the whole capture.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepctx.daemon.device_share import STATS as DEVICE_SHARE_STATS
from deepctx.daemon.label_stats import STATS as LABEL_STATS
from deepctx.profiles.merge import LEVELS, SHARES

# Stats capture._build reads from the window's tree and count maps (taken at every cut): already the
# window's own. (daemon/gpu_tree.add_gpu_buckets, daemon/device_tree.add_device_buckets, the resolvers'
# truncated stacks, the tree's CPU samples.)
PER_WINDOW = frozenset({
    "cpu_samples_in_profile", "cpu_stacks_truncated", "gpu_stacks_truncated", "gpu_calls_without_call_path",
    "device_time_in_profile_ns", "device_time_unknown_launch_ns", "device_time_without_call_path_ns",
    "device_sync_records", "native_stacks_unwind_lost", "gpu_stacks_resolved_ahead",
    "gpu_busy_ms", "gpu_busy_samples", "device_windows_unrecorded",  # the window's NVML samples (busy_meter.py)
}) | DEVICE_SHARE_STATS | LABEL_STATS  # the agent's shares in the window (a duty cycle's); the window tree's labels


def is_running_total(name: str) -> bool:
    """Whether a window's stat is a counter of the whole capture so far (see the module's docstring)."""
    return name not in PER_WINDOW and name not in SHARES and name not in LEVELS


class WindowDeltas:
    """The windows of one capture, in order: each window's stats with its running totals turned into what
    the window added to them. A running total below its previous value started again (a counter reset):
    the window added all of it."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def __call__(self, stats: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in stats.items():
            if isinstance(v, int) and not isinstance(v, bool) and is_running_total(k):
                prev = self._last.get(k, 0)
                out[k] = v - prev if v >= prev else v
                self._last[k] = v
            else:
                out[k] = v
        return out
