"""How long the device-activity agent recorded in each attached share of a duty cycle: what device times
are scaled up by.

The time the probes were attached (from the middle of the attach to the middle of the detach, what the GPU
API calls are scaled by) is longer than what the agent recorded: it starts CUPTI only when its watcher sees
the probes (within 100 ms), and kernels still queued on the GPU when it stops run unrecorded. Scaled by it,
an H200's ResNet-50 GPU time per step came out a third low (`--gpu-duty 0.1`: 21.7 ms against 32.4 ms from
full captures). A share ends with the agent's stop (DeviceActivity.stop): it stops recording, then hands
over every record, those of work still running without times (counted, device_records_unfinished_at_stop);
the flush instant it reports is the stop's. Each share is measured three ways, all kept as stats:

- first record to flush (what device times are scaled by): from the start of the first kernel, copy or set
  recorded to the stop. The first kernel launched after CUPTI started waits behind the queue as long as
  those launched before the stop do after it, so this is as long as the launches recorded; on an
  idle-then-busy GPU it leaves out the wait for the first launch. A share with no record and no launch
  announced counts active to flush (the GPU had nothing to run: nothing was missed). One with launches
  but no record counts nothing: its work had not started by the stop (records unfinished, a share shorter
  than the queue), or its records never came (none unfinished either: device_shares_lost);
- active to flush: from when the agent said it was active (or the probes were attached, if later) to the
  stop: the queue too long on a busy GPU;
- span: from the first record's start to the last record's end: too short on a GPU that idles.

Until the agent stopped before handing over, a share ended with CUPTI's ordinary flush, which keeps back a
whole buffer while any record in it is of unfinished work; what it kept went with the probes. On the H200
(ResNet-50, 20 shares with the workload's step times, bench/duty_shares.py --steps) a share recorded either
95% of its steps' kernels, or about half, or none: the scaled totals came out 14 to 25% low.

On the mock runtime with a bounded queue and records handed over as their work ends
(`tests/integration/device/test_device_duty.py`), the first way gives the capture's true device time
(0.996 to 0.998 of it behind a 100 ms queue), the attached time 0.80 to 0.83 of it.

On the H200 (ResNet-50 training, BENCHMARKS.md "--gpu-duty on the H200: shares lost records at their
end"), with the stop every share recorded the job's GPU time per step (30 shares: 30.9 ms median, 29.6 to
31.9; NVML's busy time 31.6). What scaling by this time misses is the job's own slowdown while recorded
(the time outside the shares ran faster): 2 to 9% sampled, 18 to 24% exact; daemon/busy_meter.py scales
by the GPU's busy time instead where NVML can tell it. No record of an earlier share arrived late (stale:
1 of 250,000).
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
    unfinished: int


class _Span(Protocol):
    first_start_ns: int
    last_end_ns: int
    records: int
    device_ns: int
    stale: int
    stale_ns: int


class _Device(Protocol):
    def flush_state(self, bpf: Any) -> _Flush: ...

    def take_span(self, bpf: Any) -> _Span: ...

    def correlations(self, bpf: Any) -> int: ...


@dataclass
class DeviceShares:
    """The candidates summed over one window's (or capture's) shares, as profile stats (ms)."""

    shares: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("active_to_flush", "first_record_to_flush", "span"), 0.0))
    records: int = 0
    device_ns: int = 0  # the records' own time, of work that started in its share
    stale: int = 0  # records of work that started before their share (an earlier one's, handed over late)
    stale_ns: int = 0
    lost: int = 0  # shares whose launches' records never came (none handed over, none unfinished): not counted
    correlations_seen: int = 0  # the capture's announced launches when the last share ended
    unfinished_seen: int = 0  # the agent's records handed over unfinished, when the last share ended
    # what the agent recorded in each share (monotonic s): first record to flush, or active to flush
    intervals: list[tuple[float, float]] = field(default_factory=list)

    @property
    def recorded_s(self) -> float:
        """What device times are scaled by: the recorded stretches' length."""
        return sum(b - a for a, b in self.intervals)

    def add(self, dev: _Device, bpf: Any, attached_at: float, ended_at: float, pid: int = 0) -> None:
        """One share: the agent's probes attached at attached_at and were let go from ended_at (CLOCK_MONOTONIC
        seconds); read after the share's flush, its span taken for the next share."""
        f, span = dev.flush_state(bpf), dev.take_span(bpf)
        seen = dev.correlations(bpf)  # a running total of the capture's program (dev_stats is never cleared)
        launched, self.correlations_seen = seen - self.correlations_seen, seen
        unfinished, self.unfinished_seen = f.unfinished - self.unfinished_seen, f.unfinished  # the agent's running count
        flushed = f.started_ns * _S if f.started_ns * _S >= attached_at else ended_at
        # active in this share: it said so (and has not said idle since), or went idle only as it ended
        active = f.active_ns > f.idle_ns or f.idle_ns * _S >= ended_at
        cand = {"active_to_flush": max(0.0, flushed - max(f.active_ns * _S, attached_at)) if active else 0.0,
                "first_record_to_flush": max(0.0, flushed - span.first_start_ns * _S) if span.records else 0.0,
                "span": (span.last_end_ns - span.first_start_ns) * _S if span.records else 0.0}
        self.shares += 1
        self.records += span.records
        self.device_ns += span.device_ns
        self.stale += span.stale
        self.stale_ns += span.stale_ns
        if span.records:
            if cand["first_record_to_flush"] > 0:  # not all of it queued past the stop
                self.intervals.append((span.first_start_ns * _S, flushed))
        elif launched:  # launches but no record: not an idle GPU; none ran by the stop, or their records were lost
            self.lost += not unfinished
        elif cand["active_to_flush"] > 0:
            self.intervals.append((flushed - cand["active_to_flush"], flushed))
        for k, v in cand.items():
            self.seconds[k] += v
        # each share's instants from its attach (s): what a GPU run needs to judge the candidates afresh
        at = {"active": f.active_ns * _S - attached_at if active else None, "flush": flushed - attached_at,
              "first_start": span.first_start_ns * _S - attached_at if span.records else None,
              "last_end": span.last_end_ns * _S - attached_at if span.records else None,
              "detached": ended_at - attached_at}
        log.debug("device share", extra={"pid": pid, "records": span.records, "launched": launched,
                                         "unfinished": unfinished,
                                         "attached_mono": round(attached_at, 6),
                                         "device_ms": round(span.device_ns / 1e6, 3),
                                         "stale": span.stale, "stale_ms": round(span.stale_ns / 1e6, 3)}
                  | {f"{k}_s": round(v, 4) for k, v in cand.items()}
                  | {f"{k}_at_s": round(v, 4) for k, v in at.items() if v is not None})

    def stats(self) -> dict[str, int]:
        out = {f"device_share_ms_{k}": round(1000 * v) for k, v in self.seconds.items()}
        return out | {"device_shares": self.shares, "device_share_records": self.records,
                      "device_share_device_ms": round(self.device_ns / 1e6), "device_share_stale_records": self.stale,
                      "device_share_stale_ms": round(self.stale_ns / 1e6), "device_shares_lost": self.lost,
                      "device_recorded_ms": round(1000 * self.recorded_s)}


# Every stat a window's shares give: the window's own, not running totals (daemon/store/deltas.py)
STATS = frozenset(DeviceShares().stats())
