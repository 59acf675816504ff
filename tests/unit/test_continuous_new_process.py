"""bench/continuous_new_process.py's reading of deepctxd's JSON log and Status totals, and its summary (no timing
asserted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import continuous_new_process as cnp  # noqa: E402


def line(msg: str, **fields: object) -> str:
    return json.dumps({"ts": 100.0, "level": "info", "logger": "deepctx.capture", "msg": msg, **fields})


def test_log_event_finds_the_pid_s_line_after_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    old = line("probes ready", pid=42, compile_s=2.0) + "\n"
    log.write_text(old + "Traceback (most recent call last):\n{not json\n"
                   + line("probes ready", pid=43) + "\n" + line("probes ready", pid=42, compile_s=0.0) + "\n")
    assert cnp.log_event(log, "probes ready", 42)["compile_s"] == 2.0
    assert cnp.log_event(log, "probes ready", 42, offset=len(old))["compile_s"] == 0.0  # the earlier capture's skipped
    assert cnp.log_event(log, "probes ready", 44) is None


def test_log_pids_are_the_captures_seen_after_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    old = line("probes detached", pid=7) + "\n"
    log.write_text(old + line("continuous capture", pid=42) + "\n" + line("serving", pid=9) + "\n"
                   + line("probes ready", pid=43) + "\n")
    assert cnp.log_pids(log, len(old)) == {42, 43}  # the daemon's own "serving" pid is no capture


def test_cache_builds_are_the_kinds_built_between_two_totals() -> None:
    before = {"host_cache_builds_unwind": 3.0, "host_cache_builds_symbols": 1.0, "host_cache_hits": 5.0}
    after = {"host_cache_builds_unwind": 17.0, "host_cache_builds_symbols": 1.0, "host_cache_builds_python": 1.0,
             "host_cache_hits": 9.0}
    assert cnp.cache_builds(before, after) == {"python": 1, "unwind": 14}


def row(process: int, net: float, others: list[int] | None = None) -> dict:
    return {"process": process, "net_cpu_s": net, "others": others or []}


def test_summary_medians_and_the_first_apart_and_rows_with_other_captures_left_out() -> None:
    s = cnp.summary([row(1, 0.35), row(2, 0.13), row(3, 0.10), row(4, 2.0, [999]), row(5, 0.09)], budget_s=0.3)
    assert s["counted"] == 4 and s["left_out"] == [4]
    assert s["median_cpu_s"] == (0.13 + 0.10) / 2 and s["within_budget"]
    assert s["first_cpu_s"] == 0.35 and s["later_median_cpu_s"] == 0.10
    assert not cnp.summary([row(1, 0.5), row(2, 0.4)], budget_s=0.3)["within_budget"]


def test_net_cpu_takes_the_idle_rate_over_the_span_off() -> None:
    assert cnp.net_cpu(0.42, 0.015, 4.0) == 0.42 - 0.06
