"""The benchmarks' rate second by second (bench/workloads.py) and its drift over a run (bench/gpu_overhead.py):
issue #31's "no cost creeping up" shows as a drift below the alone runs'."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gpu_overhead import drift  # noqa: E402
from workloads import steps_by_second  # noqa: E402


def test_steps_fall_in_their_whole_seconds() -> None:
    t0 = 100.0
    ends = [100.1, 100.5, 100.99, 101.0, 101.7, 102.2, 103.05, 103.5]  # the fourth second is partial: left out
    assert steps_by_second(t0, ends) == [3, 2, 1]
    assert steps_by_second(t0, []) == []
    assert steps_by_second(t0, [100.2, 100.4]) == []  # under a second: no whole second


def test_drift_compares_the_last_third_with_the_first() -> None:
    assert drift([100, 100, 100, 100, 100, 100]) == 1.0
    assert drift([100, 100, 90, 80, 50, 50]) == 0.5  # a cost that grew: the rate halved
    assert drift([40, 60, 50, 50, 80, 80]) == 1.6
    assert drift([100, 90]) is None and drift([0, 5, 5]) is None
