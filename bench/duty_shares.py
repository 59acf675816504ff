"""Each attached share of the --gpu-duty captures in a `bench/gpu_duty_scaling.sh` run, and the GPU rate it
recorded against the full captures'.

    python3 bench/duty_shares.py OVERHEAD_TXT DAEMON_LOG

OVERHEAD_TXT: gpu_overhead.py's output (its JSON rows); DAEMON_LOG: the daemon's log at debug level
(--daemon-log DIR --daemon-log-level debug: DIR/daemon-default.log), whose "device share" lines
daemon/device_share.py writes. The captures are matched to the rows in order. Per share: records, their own
time, stale records (work begun before the share), the instants from the share's attach (agent active,
first record's start, last record's end, flush, detach) and the density (device time over first record to
flush). Per capture: each interval's density and the GPU time per step it gives at the block's step rate,
next to the profile's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

INTERVALS = ("first_record_to_flush", "span", "active_to_flush")


def captures(log: Path) -> list[list[dict]]:
    """The "device share" lines of each capture, in the order the captures finished."""
    out: list[list[dict]] = []
    cur: list[dict] | None = None
    for line in log.read_text().splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        msg = d.get("msg")
        if msg == "capture started":
            cur = []
        elif msg == "device share" and cur is not None:
            cur.append(d)
        elif msg == "capture finished" and cur is not None:
            out.append(cur)
            cur = None
    return out


def at(share: dict, name: str) -> str:
    v = share.get(f"{name}_at_s")
    return "-" if v is None else f"{v:7.3f}"


def report(rows: list[dict], caps: list[list[dict]]) -> None:
    on = [r for r in rows if r["variant"] != "alone"]
    print(f"{len(on)} captures in the rows, {len(caps)} in the log")
    for r, shares in zip(on, caps, strict=False):  # a run cut short: fewer in the log
        per_step = r.get("profile_gpu_ms_per_step")
        print(f"\n{r['variant']} (block {r['block']}): {r['steps_per_s']:.2f} steps/s, profile "
              f"{per_step:.2f} GPU ms/step" if per_step else f"\n{r['variant']} (block {r['block']})")
        sums = dict.fromkeys(INTERVALS, 0.0)
        device_ms = 0.0
        for s in shares:
            first = s.get("first_record_to_flush_s", 0.0)
            print(f"  {s['records']:6d} records {s.get('device_ms', 0):7.1f} ms, stale {s.get('stale', 0)} "
                  f"({s.get('stale_ms', 0):.1f} ms) | active {at(s, 'active')} first {at(s, 'first_start')} "
                  f"last {at(s, 'last_end')} flush {at(s, 'flush')} detached {at(s, 'detached')} | density "
                  f"{s.get('device_ms', 0) / 1000 / first if first else 0:.3f}")
            device_ms += s.get("device_ms", 0)
            for k in INTERVALS:
                sums[k] += s.get(f"{k}_s", 0.0)
        for k in INTERVALS:
            if sums[k]:
                density = device_ms / 1000 / sums[k]
                print(f"  {k}: density {density:.3f}, {1000 * density / r['steps_per_s']:.2f} GPU ms/step")
        if not shares and r.get("device_time_in_profile_ns") and per_step:
            seconds = r["device_time_in_profile_ns"] / 1e6 / per_step / r["steps_per_s"]
            print(f"  full capture: density {r['device_time_ns'] / 1e9 / seconds:.3f}")


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.startswith("{")]
    report(rows, captures(Path(sys.argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
