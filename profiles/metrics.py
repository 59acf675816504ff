"""The metrics of the profile document, defined once: every node's values, in the document's order, and
what summaries, stores and views derive from them."""

from __future__ import annotations

# A node's metrics in the order the Profile message carries them (docs/formats.md).
METRICS = ("cpu_samples", "calls", "api_time_ns", "gpu_time_ns", "bytes", "sync_wait_ns")
# What a kernel's summary keeps, and what a process's totals add (kernel launches, bytes of copies).
KERNEL_METRICS = ("calls", "api_time_ns", "gpu_time_ns")
PROCESS_METRICS = (*METRICS, "launches", "copy_bytes")

# Units decide formatting (and pprof/speedscope units); order is the column order in the terminal.
METRIC_UNITS: dict[str, str] = {
    "cpu_samples": "samples",
    "gpu_time_ns": "ns",
    "calls": "count",
    "api_time_ns": "ns",
    "bytes": "bytes",
    "sync_wait_ns": "ns",
}
METRIC_TITLES: dict[str, str] = {
    "cpu_samples": "CPU samples",
    "gpu_time_ns": "GPU time",
    "calls": "calls",
    "api_time_ns": "API time",
    "bytes": "bytes",
    "sync_wait_ns": "sync wait",
}
# Which metric a diff compares when none is asked for: the first with a nonzero total.
DEFAULT_SORT_ORDER = ("cpu_samples", "gpu_time_ns", "api_time_ns", "calls", "sync_wait_ns", "bytes")
# Which metric ranks stored windows (top, fleet), and which one a profile opens on (report, its HTML,
# profile, exports), when none is asked for: the first with a nonzero total. GPU time first: a profile that
# has it is about the GPU, and its launching threads' CPU samples are the lesser part.
RANK_ORDER = ("gpu_time_ns", "cpu_samples", "api_time_ns", "calls", "sync_wait_ns", "bytes")


def rank_metric(totals: dict[str, int], wanted: str | None = None) -> str:
    """wanted when it is a metric windows carry, else the first of RANK_ORDER with a nonzero total."""
    if wanted:
        if wanted not in METRICS:
            raise ValueError(f"unknown metric {wanted!r} (known: {', '.join(METRICS)})")
        return wanted
    return next((m for m in RANK_ORDER if totals.get(m)), "cpu_samples")


def kernel_rank_metric(totals: dict[str, int], wanted: str | None = None) -> str:
    if wanted in KERNEL_METRICS:
        return wanted
    return "gpu_time_ns" if totals.get("gpu_time_ns") else "calls"
