"""What the device-activity agent recorded in each attached share of a duty cycle, measured three ways.

The duty cycle scales device times up by the time its probes were attached, from the middle of the attach
to the middle of the detach. The agent records less than that: it starts CUPTI only when its watcher sees
the probes (within 100 ms), and the records of kernels still queued on the GPU at the flush that ends the
share are handed over after the probes are gone. On an H200 (ResNet-50, `--gpu-duty 0.1`) the scaled GPU
time per step came out a third low. Which interval is right cannot be told without a GPU, so each share's
candidates are kept as stats, to be compared with a full capture's GPU time there:

- active to flush: from when the agent said it was active (or the probes were attached, if later) to the
  flush that ended the share (the last records the probes could see);
- first record to flush: from the start of the first kernel, copy or set recorded to that flush (on a busy
  GPU the first kernel launched after the start waits behind the queue: the interval of launches recorded
  is that much shorter at both ends);
- span: from the first record's start to the last record's end.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger("deepctx.capture")

_S = 1e-9  # ns to s


class _Flush(Protocol):
    started_ns: int
    active_ns: int
    idle_ns: int


class _Span(Protocol):
    first_start_ns: int
    last_end_ns: int
    records: int


class _Device(Protocol):
    def flush_state(self, bpf: Any) -> _Flush: ...

    def take_span(self, bpf: Any) -> _Span: ...


@dataclass
class DeviceShares:
    """The candidates summed over one window's (or capture's) shares, as profile stats (ms)."""

    shares: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("active_to_flush", "first_record_to_flush", "span"), 0.0))
    records: int = 0

    def add(self, dev: _Device, bpf: Any, attached_at: float, ended_at: float, pid: int = 0) -> None:
        """One share: the agent's probes attached at attached_at and were let go from ended_at (CLOCK_MONOTONIC
        seconds); read after the share's flush, its span taken for the next share."""
        f, span = dev.flush_state(bpf), dev.take_span(bpf)
        flushed = f.started_ns * _S if f.started_ns * _S >= attached_at else ended_at
        # active in this share: it said so (and has not said idle since), or went idle only as it ended
        active = f.active_ns > f.idle_ns or f.idle_ns * _S >= ended_at
        cand = {"active_to_flush": max(0.0, flushed - max(f.active_ns * _S, attached_at)) if active else 0.0,
                "first_record_to_flush": max(0.0, flushed - span.first_start_ns * _S) if span.records else 0.0,
                "span": (span.last_end_ns - span.first_start_ns) * _S if span.records else 0.0}
        self.shares += 1
        self.records += span.records
        for k, v in cand.items():
            self.seconds[k] += v
        log.debug("device share", extra={"pid": pid, "attached_for_s": round(ended_at - attached_at, 4),
                                         "records": span.records} | {f"{k}_s": round(v, 4) for k, v in cand.items()})

    def stats(self) -> dict[str, int]:
        out = {f"device_share_ms_{k}": round(1000 * v) for k, v in self.seconds.items()}
        return out | {"device_shares": self.shares, "device_share_records": self.records}
