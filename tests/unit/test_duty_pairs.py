"""bench/duty_pairs.py's pairing of a workload's steps with the duty cycle's attached and detached stretches."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import duty_pairs as dp  # noqa: E402


def log_line(pid: int, attached: bool, began: float, ended: float) -> str:
    return json.dumps({"ts": 0, "level": "debug", "logger": "deepctx.capture", "msg": dp.SWITCHED, "pid": pid,
                       "attached": attached, "from_mono": began, "to_mono": ended})


def steps(start: float, end: float, step_s: float) -> list[float]:
    out, t = [], start
    while t + step_s <= end + 1e-9:
        t += step_s
        out.append(round(t, 9))
    return out


def test_switches_of_the_pid_in_order() -> None:
    lines = [log_line(7, False, 3.0, 3.1), "not json", log_line(8, True, 1.0, 1.1), log_line(7, True, 1.0, 1.2),
             json.dumps({"msg": "probes ready", "pid": 7})]
    assert dp.read_switches(lines, 7) == [dp.Switch(True, 1.0, 1.2), dp.Switch(False, 3.0, 3.1)]


def test_attached_stretches_are_paired_with_their_detached_neighbours() -> None:
    """Steps of 10 ms detached and 11 ms attached, switches every second: each pair reads 1.1; the steps
    within the guard after a switch, and those that straddle one, are left out."""
    switches, ends, t = [], [], 0.0
    for i in range(7):  # off, on, off, on, off, on, off
        attached = i % 2 == 1
        switches.append(dp.Switch(attached, t, t + 0.045))
        ends += steps(t, t + 1.0, 0.011 if attached else 0.010)
        t += 1.0
    switches.append(dp.Switch(True, t, t + 0.045))
    seq = dp.stretches(switches, ends, guard_s=0.1)
    assert [s.attached for s in seq if s] == [False, True, False, True, False, True, False]
    assert [s.steps for s in seq if s] == [85, 76, 85, 76, 85, 76, 85]  # whole steps within 0.145 to 1 s
    assert dp.pairs(seq) == pytest.approx([1.1, 1.1, 1.1])
    row = dp.summary(seq)
    assert (row["pairs"], row["stretches_on"], row["stretches_off"]) == (3, 3, 4)
    assert row["ratio_median"] == pytest.approx(1.1) and row["pooled_ratio"] == pytest.approx(1.1)
    assert row["ratio_mean_95"] == pytest.approx([1.1, 1.1])


def test_a_stretch_with_too_few_steps_breaks_its_pairs() -> None:
    cuts = [(False, 0.0), (True, 1.0), (False, 2.0), (True, 2.02), (False, 3.0), (True, 4.0), (False, 5.0),
            (True, 6.0)]
    switches = [dp.Switch(a, t, t) for a, t in cuts]
    seq = dp.stretches(switches, steps(0.0, 6.0, 0.01), guard_s=0.0)
    assert seq[2] is None  # 20 ms: fewer than three steps
    assert dp.pairs(seq) == pytest.approx([1.0])  # only the attached stretch from 4 to 5 s has both neighbours
