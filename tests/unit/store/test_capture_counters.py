"""Stats of continuous captures in the window store: the probes' counters are running totals of the whole
capture (their BPF stats maps are not cleared when a window is cut), so merged windows must count each
capture once (its latest totals), not once per window; per-window stats add, shares stay weighted."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from profile_paths import total

from deepctx.daemon import continuous
from deepctx.daemon.capture import CaptureResult
from deepctx.daemon.config import Config
from deepctx.daemon.continuous import ContinuousProfiler
from deepctx.daemon.store import WindowStore
from deepctx.daemon.store.deltas import PER_WINDOW, WindowDeltas, is_running_total
from deepctx.daemon.tree import CallTree
from deepctx.host.frames import Frame

T0 = 1_800_000_000.0
WINDOW_S = 60.0


def result(pid: int, start: float, stats: dict[str, int], cpu: int = 5) -> CaptureResult:
    tree = CallTree(f"train-{pid}")
    tree.add([Frame("thread", "python3", tid=pid), Frame("native", "step", module="libx.so")], "cpu_samples", cpu)
    return CaptureResult(pid=pid, command=f"train-{pid}", duration_s=WINDOW_S, started_unix=start, ended="window",
                         sample_hz=19, tree=tree, stats=dict(stats), hostname="gpu-test-01", mode="sampled")


class Service:
    """What ContinuousProfiler uses of the daemon's service: the store, the totals, run_continuous (here it
    hands the capture's windows, cut as capture.Capture cuts them, to the continuous store callback)."""

    def __init__(self, store: WindowStore, windows: dict[int, list[CaptureResult]]) -> None:
        self.store = store
        self.totals = {"continuous_windows": 0}
        self.windows = windows

    def quota_refusal(self, uid: int, continuous: bool) -> str | None:
        return None

    def run_continuous(self, pid: int, opts: Any, on_window: Callable[[CaptureResult, float, float], None], *,
                       uid: int, handle: Any = None) -> None:
        for r in self.windows[pid]:
            on_window(r, r.started_unix, r.started_unix + r.duration_s)


def run_captures(store: WindowStore, windows: dict[int, list[CaptureResult]]) -> None:
    service = Service(store, windows)
    profiler = ContinuousProfiler(service, Config(store_path=store.path), threading.Event())
    with pytest.MonkeyPatch.context() as mp:  # the pids are made up: no process to bind nor read
        mp.setattr(continuous.ProcessHandle, "open", classmethod(lambda cls, pid: cls(pid, -1, 0, _closed=True)))
        mp.setattr(continuous, "real_uid", lambda pid: 1000)
        for pid in windows:
            profiler._profile(pid)  # what each capture's thread runs
    assert service.totals["continuous_windows"] == sum(len(w) for w in windows.values())


@pytest.fixture
def store(tmp_path: Path) -> WindowStore:
    s = WindowStore(str(tmp_path / "w.db"), clock=lambda: T0 + 3600)
    yield s
    s.close()


def capture(pid: int, running: list[int], per_window: list[int], duty: list[int]) -> list[CaptureResult]:
    return [result(pid, T0 + i * WINDOW_S, {"gpu_api_calls": calls, "cpu_samples": 3 * calls,
                                             "gpu_api_stacks_lost": calls // 10, "gpu_probe_resumes": i,
                                             "cpu_samples_in_profile": in_profile, "gpu_probe_duty_permille": d,
                                             "gpu_uprobes": 12, "device_agent_injected": 1})
            for i, (calls, in_profile, d) in enumerate(zip(running, per_window, duty, strict=True))]


def test_running_totals_of_one_capture_merge_to_its_latest(store: WindowStore) -> None:
    run_captures(store, {100: capture(100, [10, 25, 40], [4, 6, 8], [100, 100, 400])})
    doc = store.query(T0, T0 + 3600, pid=100)
    assert doc is not None
    s = doc["stats"]
    assert s["windows"] == 3
    assert s["gpu_api_calls"] == 40  # not 10 + 25 + 40 = 75
    assert s["cpu_samples"] == 120 and s["gpu_api_stacks_lost"] == 4 and s["gpu_probe_resumes"] == 2
    assert s["cpu_samples_in_profile"] == 4 + 6 + 8  # per window: added
    assert s["gpu_probe_duty_permille"] == 200  # equal windows: (100 + 100 + 400) / 3
    assert (s["gpu_uprobes"], s["device_agent_injected"]) == (12, 1)  # levels: the largest
    assert total(doc, "cpu_samples") == 3 * 5  # the trees still add
    # a query over the last window alone: what that window added
    last = store.query(T0 + 2 * WINDOW_S, T0 + 3600, pid=100)
    assert (last["stats"]["windows"], last["stats"]["gpu_api_calls"], last["stats"]["cpu_samples"]) == (1, 15, 45)


def test_captures_merge_to_the_sum_of_their_latest(store: WindowStore) -> None:
    run_captures(store, {100: capture(100, [10, 25, 40], [1, 1, 1], [1000, 1000, 1000]),
                         200: capture(200, [7, 9], [2, 2], [1000, 1000])})
    doc = store.query(T0, T0 + 3600)
    assert doc["stats"]["windows"] == 5
    assert doc["stats"]["gpu_api_calls"] == 40 + 9  # not 75 + 16
    assert doc["stats"]["cpu_samples"] == 3 * (40 + 9)
    assert doc["stats"]["cpu_samples_in_profile"] == 3 + 4
    assert doc["stats"]["device_agent_injected"] == 1
    assert store.query(T0, T0 + 3600, pid=200)["stats"]["gpu_api_calls"] == 9


def test_continuous_match_picks_the_gpu_processes_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """continuous_match: only GPU processes whose command line matches are profiled; "" takes them all."""
    from deepctx.daemon.processes import ProcessSummary

    procs = [ProcessSummary(11, "u", "python3 /srv/jobs/train.py --lr 3", "3.12", ["libcudart.so.13"]),
             ProcessSummary(12, "u", "python3 /srv/jobs/serve.py", "3.12", ["libcudart.so.13"]),
             ProcessSummary(13, "u", "python3 /srv/jobs/train.py", "3.12", [])]  # no GPU library
    monkeypatch.setattr(continuous, "list_processes", lambda: procs)

    def started(match: str) -> list[int]:
        profiler = ContinuousProfiler(None, Config(continuous_match=match), threading.Event())
        ran: list[int] = []
        monkeypatch.setattr(profiler, "_profile", ran.append)
        pids = profiler.scan()
        for t in profiler._active.values():
            t.join()
        assert sorted(ran) == sorted(pids)
        return sorted(pids)

    assert started("") == [11, 12]
    assert started(r"/train\.py\b") == [11]
    assert started("^nothing") == []


def test_window_deltas() -> None:
    d = WindowDeltas()
    assert d({"gpu_api_calls": 10, "cpu_samples_in_profile": 4, "gpu_uprobes": 12, "gpu_probe_duty_permille": 250}) \
        == {"gpu_api_calls": 10, "cpu_samples_in_profile": 4, "gpu_uprobes": 12, "gpu_probe_duty_permille": 250}
    assert d({"gpu_api_calls": 25, "cpu_samples_in_profile": 4, "gpu_uprobes": 12, "gpu_probe_duty_permille": 250}) \
        == {"gpu_api_calls": 15, "cpu_samples_in_profile": 4, "gpu_uprobes": 12, "gpu_probe_duty_permille": 250}
    assert d({"gpu_api_calls": 40})["gpu_api_calls"] == 15
    assert d({"gpu_api_calls": 6})["gpu_api_calls"] == 6  # below the last total: the counter started again
    assert d({"gpu_api_calls": 6, "python_captures": 3}) == {"gpu_api_calls": 0, "python_captures": 3}
    # the per-window stats are those capture._build computes from the window's own counts
    assert not any(is_running_total(k) for k in PER_WINDOW)
    # a duty cycle's shares are measured window by window: each window keeps its own
    assert d({"device_recorded_ms": 2000, "device_shares": 5, "device_share_ms_span": 1900}) \
        == {"device_recorded_ms": 2000, "device_shares": 5, "device_share_ms_span": 1900}
    assert d({"device_recorded_ms": 2100, "device_shares": 5, "device_share_ms_span": 1950}) \
        == {"device_recorded_ms": 2100, "device_shares": 5, "device_share_ms_span": 1950}
    assert {"device_shares_lost", "device_share_stale_records", "device_share_device_ms"} <= PER_WINDOW
    # states, not counters: a window keeps them as they are
    assert d({"device_probes_attached": 1, "device_agent_awaited": 1}) == {"device_probes_attached": 1,
                                                                          "device_agent_awaited": 1}
    assert d({"device_probes_attached": 1, "device_agent_awaited": 0}) == {"device_probes_attached": 1,
                                                                          "device_agent_awaited": 0}
    assert all(is_running_total(k) for k in ("gpu_api_calls", "cpu_samples", "cpu_user_stacks_lost",
                                             "device_records", "python_captures", "table_files", "store_failed",
                                             "gpu_stack_map_clears", "device_agent_flushes"))


def test_each_window_warns_of_what_it_lost(store: WindowStore) -> None:
    """The capture's warnings come from its running counters; a window says them for its own share."""
    from deepctx.daemon.capture import stat_warnings

    windows = capture(100, [10, 25, 40], [1, 1, 1], [1000, 1000, 1000])
    for r, lost in zip(windows, [0, 5, 5], strict=True):  # 5 samples lost in the second window, none after
        r.stats["cpu_user_stacks_lost"] = lost
        r.warnings = ["DWARF unwinding unavailable, frame pointers only: test"] + stat_warnings(r.stats)
    run_captures(store, {100: windows})
    said = [store.query(T0 + i * WINDOW_S + 1, T0 + (i + 1) * WINDOW_S - 1, pid=100)["warnings"] for i in range(3)]
    lost = "5 CPU samples lost their call path or were dropped (see stats)"
    # gpu_api_stacks_lost runs 1, 2, 4 over the capture: the windows lost 1, 1 and 2
    stacks = [f"{n} GPU API calls were dropped or lost their call path (see stats)" for n in (1, 1, 2)]
    assert said[0] == ["DWARF unwinding unavailable, frame pointers only: test", stacks[0]]
    assert said[1] == ["DWARF unwinding unavailable, frame pointers only: test", lost, stacks[1]]
    assert said[2] == ["DWARF unwinding unavailable, frame pointers only: test", stacks[2]]
