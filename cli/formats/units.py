"""Metric values as short, honest text: exact counts, times and sizes with units."""

from __future__ import annotations

from deepctx.profiles.metrics import METRIC_UNITS

_TIME = ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs"))
_SIZE = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def fmt(metric: str, value: int, ascii_only: bool = False) -> str:
    """'' for zero (keeps tables readable), exact integers for counts, 3 significant digits otherwise."""
    if value == 0:
        return ""
    unit = METRIC_UNITS.get(metric, "count")
    if unit == "ns":
        for scale, name in _TIME:
            if abs(value) >= scale:
                if ascii_only and name == "µs":
                    name = "us"
                return f"{_sig(value / scale)} {name}"
        return f"{value} ns"
    if unit == "bytes":
        for scale, name in _SIZE:
            if abs(value) >= scale:
                return f"{_sig(value / scale)} {name}"
        return f"{value} B"
    return str(value)


def fmt_signed(metric: str, value: int, ascii_only: bool = False) -> str:
    if value == 0:
        return "0"
    return ("+" if value > 0 else "-") + fmt(metric, abs(value), ascii_only)


def _sig(x: float) -> str:
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def percent(value: int, total: int) -> str:
    return f"{100.0 * value / total:.1f}%" if total else ""
