"""bench/duty_pairs.py's pairing of a workload's steps with the duty cycle's attached and detached stretches."""

from __future__ import annotations

import argparse
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

    assert dp.switch_times(dp.read_switches(lines, 7)) == {"attach_s_median": 0.2, "detach_s_median": 0.1}


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
    assert row["median_step_ratio_median"] == pytest.approx(1.1)


def test_one_slow_step_moves_a_stretchs_mean_but_not_its_median() -> None:
    switches = [dp.Switch(a, t, t) for a, t in [(False, 0.0), (True, 1.0), (False, 2.0), (True, 3.0)]]
    ends = steps(0.0, 1.0, 0.01) + steps(1.0, 1.49, 0.01) + [1.99] + steps(1.99, 3.0, 0.01)  # one 0.5 s step
    seq = dp.stretches(switches, ends, guard_s=0.0)
    assert dp.pairs(seq, median=True) == pytest.approx([1.0])
    assert dp.pairs(seq)[0] > 1.4


def test_a_stretch_with_too_few_steps_breaks_its_pairs() -> None:
    cuts = [(False, 0.0), (True, 1.0), (False, 2.0), (True, 2.02), (False, 3.0), (True, 4.0), (False, 5.0),
            (True, 6.0)]
    switches = [dp.Switch(a, t, t) for a, t in cuts]
    seq = dp.stretches(switches, steps(0.0, 6.0, 0.01), guard_s=0.0)
    assert seq[2] is None  # 20 ms: fewer than three steps
    assert dp.pairs(seq) == pytest.approx([1.0])  # only the attached stretch from 4 to 5 s has both neighbours


def test_a_kept_folder_is_read_again_for_the_process_switched_most(tmp_path: Path) -> None:
    """--reanalyse: the pid is the one with the most switches in the log (another process the continuous
    daemon picked up for a moment has fewer)."""
    switches, ends, t = [], [], 0.0
    for i in range(5):  # off, on, off, on, off
        switches.append(log_line(41, i % 2 == 1, t, t))
        ends += steps(t, t + 1.0, 0.012 if i % 2 else 0.010)
        t += 1.0
    switches += [log_line(41, True, t, t), log_line(99, True, 0.5, 0.5)]
    (tmp_path / "steps-w.txt").write_text("\n".join(f"{e:.6f}" for e in ends))
    (tmp_path / "daemon-w.log").write_text("\n".join(switches))
    args = argparse.Namespace(mode="sampled", agent=True, period=2.0, guard=0.0, clean=0.3, warm=5.0,
                              torch_profiler=False)
    row = dp.analyse("w", tmp_path, args)
    assert row["pairs"] == 2 and row["ratio_median"] == pytest.approx(1.2, rel=1e-3)
    assert row["median_step_ratio_median"] == pytest.approx(1.2, rel=1e-3)
    assert row["mode"] == "sampled" and row["agent"] is True


def test_the_rate_before_the_first_switch_leaves_out_its_first_half() -> None:
    """Steps of 20 ms for 2 s (warming up), then 10 ms until the first switch at 4 s: the second half of what ran
    before it, 1 to 4 s... less the warm half: from 2 s on, 100 steps a second."""
    ends = steps(0.0, 2.0, 0.02) + steps(2.0, 6.0, 0.01)
    switches = [dp.Switch(True, 4.0, 4.0), dp.Switch(False, 5.0, 5.0)]
    row = dp.before_first(switches, ends, skip_s=4.0)
    assert row["before_steps_per_s"] == pytest.approx(100.0, rel=1e-3)
    assert dp.before_first([], ends, 4.0) == {}


def test_the_profiler_duty_logs_switches_the_pairing_reads(tmp_path: Path) -> None:
    """bench/workloads.py's ProfilerDuty (torch.profiler switched by the loop) writes lines read_switches takes."""
    import workloads

    duty = workloads.ProfilerDuty(4.0)
    duty.switches = [{"msg": dp.SWITCHED, "pid": 7, "attached": True, "from_mono": 1.0, "to_mono": 1.5},
                     {"msg": dp.SWITCHED, "pid": 7, "attached": False, "from_mono": 3.5, "to_mono": 6.0}]
    duty.write(str(tmp_path / "sw.log"))
    assert dp.read_switches((tmp_path / "sw.log").read_text().splitlines(), 7) == [
        dp.Switch(True, 1.0, 1.5), dp.Switch(False, 3.5, 6.0)]


def test_a_cycle_costs_its_attached_share_and_its_switches() -> None:
    """Cycles of 2.003 s: attached for 0.198 s at 11 ms a step (10 ms clean), then a detach of 0.105 s whose
    steps take 15 ms, then clean steps: each whole cycle's mean step over its clean steps' mean."""
    switches, ends, t = [], [0.0], 0.0
    for _ in range(4):
        switches += [dp.Switch(True, t, t), dp.Switch(False, t + 0.198, t + 0.303)]
        ends += steps(t, t + 0.198, 0.011) + steps(t + 0.198, t + 0.303, 0.015) + steps(t + 0.303, t + 2.003, 0.01)
        t += 2.003
    switches.append(dp.Switch(True, t, t))
    ends.append(t + 0.011)
    costs = dp.cycle_costs(switches, ends, clean_s=0.3)
    # 18 steps of 11 ms, 7 of 15 ms, 170 of 10 ms: 2.003 s over 195 steps, against 10 ms
    assert costs == pytest.approx([2.003 / 195 / 0.010] * 4)
    row = dp.cycle_summary(costs)
    assert row["cycles"] == 4 and row["cycle_cost_mean"] == pytest.approx(1.0272, abs=1e-4)


def test_a_cycle_without_enough_clean_steps_is_skipped() -> None:
    switches = [dp.Switch(True, 0.0, 0.0), dp.Switch(False, 0.5, 0.6), dp.Switch(True, 1.0, 1.0),
                dp.Switch(False, 1.1, 1.2), dp.Switch(True, 3.0, 3.0)]
    ends = [0.0] + steps(0.0, 3.0, 0.01)
    # the first cycle's clean steps begin at 0.9 s: 10 of them; with clean_s 0.36, four
    assert dp.cycle_costs(switches, ends, clean_s=0.3) == pytest.approx([1.0, 1.0])
    assert dp.cycle_costs(switches, ends, clean_s=0.36) == pytest.approx([1.0])
