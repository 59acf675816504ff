"""Time spans and moments on the command line: `10m`, `1h30m`, `2d`, `90` (seconds), or a Unix time."""

from __future__ import annotations

import re
import time

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_span(text: str) -> float:
    """Seconds in a span such as '10m', '1h30m', '45s', '2d' or a plain number of seconds."""
    t = text.strip().lower()
    try:
        value = float(t)
    except ValueError:
        parts = _PART.findall(t)
        if not parts or "".join(n + u for n, u in parts) != t:
            raise ValueError(f"not a time span: {text!r} (use e.g. 30s, 10m, 1h30m, 2d)") from None
        value = sum(float(n) * _UNITS[u] for n, u in parts)
    if not value > 0 or value == float("inf"):
        raise ValueError(f"a time span must be more than 0 seconds, not {text!r}")
    return value


def moment(text: str | None, now: float | None = None) -> float:
    """A moment: None is now, a span means that long ago, '@T' is the Unix time T."""
    now = time.time() if now is None else now
    if text is None:
        return now
    if text.startswith("@"):
        try:
            return float(text[1:])
        except ValueError:
            raise ValueError(f"not a Unix time: {text!r}") from None
    return now - parse_span(text)
