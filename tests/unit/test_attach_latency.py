"""bench/attach_latency.py's reading of deepctxd's JSON log and its summary of the runs (no timing asserted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import attach_latency as al  # noqa: E402


def line(ts: float, msg: str, **fields: object) -> str:
    return json.dumps({"ts": ts, "level": "info", "logger": "deepctx.capture", "msg": msg, **fields})


LOG = [
    line(100.0, "serving", socket="/tmp/x.sock", pid=9),
    line(101.0, "capture started", session=1, pid=42, duration_s=600.0, sample_hz=99),
    "Traceback (most recent call last):",  # not JSON: skipped
    "{not json either",
    line(101.5, "capture started", session=2, pid=43),
    line(105.0, "probes ready", session=1, pid=42, families=["python", "gpu", "cpu"], compile_s=2.5, attach_s=1.25,
         attach_parts={"python": 0.25, "gpu": 0.75, "cpu": 0.25}),
    line(106.0, "probes ready", session=2, pid=43, families=["cpu"], compile_s=0.0, attach_s=0.5),
]


def test_log_events_skip_other_lines() -> None:
    events = al.log_events(LOG)
    assert [e["msg"] for e in events] == ["serving", "capture started", "capture started", "probes ready",
                                          "probes ready"]


def test_capture_times_of_one_pid_among_others() -> None:
    times = al.capture_times(al.log_events(LOG), 42)
    assert times == {"started_ts": 101.0, "ready_ts": 105.0, "compile_s": 2.5, "attach_s": 1.25,
                     "families": ["python", "gpu", "cpu"], "attach_parts": {"python": 0.25, "gpu": 0.75, "cpu": 0.25}}


def test_capture_times_last_capture_wins_and_missing_fields_are_none() -> None:
    log = LOG + [line(110.0, "capture started", session=3, pid=42), line(111.0, "probes ready", session=3, pid=42)]
    times = al.capture_times(al.log_events(log), 42)
    assert times["started_ts"] == 110.0 and times["ready_ts"] == 111.0
    assert times["compile_s"] is None and times["attach_s"] is None
    assert al.capture_times(al.log_events(LOG), 7) == {"started_ts": None, "ready_ts": None, "compile_s": None,
                                                       "attach_s": None, "families": None, "attach_parts": None}


def test_breakdown_parts_add_up_to_the_total() -> None:
    times = al.capture_times(al.log_events(LOG), 42)
    b = al.breakdown(100.75, 105.125, times)
    assert b == pytest.approx({"total": 4.375, "cli": 0.25, "preparing": 0.25, "compile": 2.5, "attach": 1.25,
                               "to_count": 0.125})
    assert sum(b[p] for p in al.PARTS[1:]) == pytest.approx(b["total"])


def test_breakdown_without_the_daemons_lines() -> None:
    b = al.breakdown(1.0, 2.5, al.capture_times([], 42))
    assert b["total"] == pytest.approx(1.5)
    assert b["cli"] is b["preparing"] is b["compile"] is b["attach"] is b["to_count"] is None


def row(mode: str, phase: str, total: float, compile_s: float | None = 1.0) -> dict:
    return {"mode": mode, "phase": phase, "total": total, "cli": 0.2, "preparing": 0.1, "compile": compile_s,
            "attach": 0.5, "to_count": 0.02}


def test_summary_medians_spread_and_budgets() -> None:
    rows = [row("exact", "warm", t) for t in (0.9, 0.7, 1.5)] + [row("exact", "cold", 3.5, None)] \
        + [{"mode": "exact", "phase": "cold", "error": "no call counted"}]
    lines = al.summary(rows)
    assert [(x["mode"], x["phase"], x["runs"]) for x in lines] == [("exact", "cold", 1), ("exact", "warm", 3)]
    cold, warm = lines
    assert warm["total"] == (0.9, 0.7, 1.5) and warm["budget_s"] == 1.0 and warm["within_budget"]
    assert cold["compile"] is None and cold["budget_s"] == 3.0 and not cold["within_budget"]
    md = al.table(lines)
    assert "| exact | warm | 3 | 0.90 (0.70–1.50) |" in md and "≤ 1.0 s (met)" in md and "≤ 3.0 s (missed)" in md
