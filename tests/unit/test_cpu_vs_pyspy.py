"""bench/cpu_vs_pyspy.py's CPU accounting from /proc and its medians (no timing asserted)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import cpu_vs_pyspy as cv  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def stat_line(pid: int, ppid: int, utime: int, stime: int, cutime: int = 0, cstime: int = 0,
              name: str = "deepctxd") -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
    return f"{pid} ({name}) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1 0"


def test_stat_cpu_reads_own_and_reaped_children_past_a_name_with_parentheses() -> None:
    own, reaped, ppid = cv.stat_cpu(stat_line(7, 1, 3 * TICK, TICK, TICK, 0, name="a) b (c"))
    assert (own, reaped, ppid) == (pytest.approx(4.0), pytest.approx(1.0), 1)


def test_tree_cpu_adds_live_descendants_only(tmp_path: Path) -> None:
    procs = {10: stat_line(10, 1, 2 * TICK, 0, TICK, 0),  # the daemon, a child it reaped (1 s)
             11: stat_line(11, 10, TICK, 0),  # its live child
             12: stat_line(12, 11, TICK, TICK),  # and grandchild
             13: stat_line(13, 1, 50 * TICK, 0)}  # someone else's
    for pid, text in procs.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(text)
    (tmp_path / "self").mkdir()
    assert cv.tree_cpu(10, proc=tmp_path) == pytest.approx(2 + 1 + 1 + 2)
    with pytest.raises(RuntimeError):
        cv.tree_cpu(99, proc=tmp_path)


def test_summary_takes_medians_never_the_best_round() -> None:
    rows = [{"daemon_cpu_s": d, "cli_cpu_s": c, "deepctx_cpu_s": d + c, "pyspy_cpu_s": p, "ratio": (d + c) / p}
            for d, c, p in [(0.8, 0.5, 1.0), (0.6, 0.4, 2.0), (0.7, 0.6, 1.5)]]
    med = cv.summary(rows)
    assert med["daemon_cpu_s"] == pytest.approx(0.7)
    assert med["deepctx_cpu_s"] == pytest.approx(1.3)
    assert med["pyspy_cpu_s"] == pytest.approx(1.5)
    assert med["ratio_of_medians"] == pytest.approx(1.3 / 1.5)
    assert "| median | 0.70 | 0.50 | 1.30 | 1.50 |" in cv.table([{**r, "round": i} for i, r in enumerate(rows)], med)
