"""The window store's age limit holds without new windows: queries and top never answer with a window past
max_age_s, the store's eviction timer removes (and counts) it with no put, and the daemon's store evicts
when it opens."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import store_producer as sp

from deepctx.daemon.config import Config
from deepctx.daemon.service_store import open_store
from deepctx.daemon.store import StoreLimits, WindowStore
from deepctx.daemon.store.sqlite import evict_interval_s

T0 = 1_800_000_000.0
TORCH = "h200_torch_ops"


def aging_store(path: Path, now: list[float]) -> WindowStore:
    """A store with a 600 s age limit on an injected clock, holding one window that ends at T0 - 60."""
    s = WindowStore(str(path), StoreLimits(max_age_s=600), clock=lambda: now[0])
    (w,) = sp.windows(T0 - 120, 1, names=(TORCH,))
    assert s.put(w) is not None
    return s


def test_expired_window_is_never_answered_and_evicted_without_put(tmp_path: Path) -> None:
    now = [T0]
    s = aging_store(tmp_path / "w.db", now)
    assert s.query(T0 - 3600, T0)["stats"]["windows"] == 1
    assert s.top(T0 - 3600, 10, T0).windows == 1
    now[0] = T0 + 540  # the window's end is exactly max_age_s old: still kept, by query and eviction alike
    assert s.query(T0 - 3600, T0)["stats"]["windows"] == 1
    now[0] = T0 + 541  # past the age limit; no eviction ran and no window came
    assert s.query(T0 - 3600, T0) is None
    assert s.query(T0 - 3600) is None
    top = s.top(T0 - 3600, 10, T0)
    assert (top.windows, top.processes, top.kernels, top.lines) == (0, [], [], [])
    st = s.stats()
    assert (st.windows, st.counters["windows_evicted_age"]) == (1, 0)  # still on disk until the eviction
    s.evict()  # the eviction timer's step
    st = s.stats()
    assert (st.windows, st.counters["windows_evicted_age"], st.counters["windows_put"]) == (0, 1, 1)
    s.close()


def test_eviction_timer_evicts_without_put_and_stops_at_close(tmp_path: Path) -> None:
    now = [T0]
    s = aging_store(tmp_path / "w.db", now)
    evict = s.evict
    evicted_after_expiry = threading.Event()
    rounds = [0]

    def step() -> None:  # the timer's eviction, observed
        armed = now[0] > T0
        evict()
        rounds[0] += 1
        if armed:
            evicted_after_expiry.set()

    s.evict = step  # type: ignore[method-assign]
    s.start_evicting(0.01)
    assert rounds[0] >= 1 and s.stats().windows == 1  # the first eviction ran at once: nothing old yet
    now[0] = T0 + 541
    assert evicted_after_expiry.wait(30), "the eviction timer did not run"
    st = s.stats()
    assert (st.windows, st.counters["windows_evicted_age"], st.counters["windows_put"]) == (0, 1, 1)
    evictor = s._evictor
    assert evictor is not None and evictor.is_alive()
    s.close()
    assert not evictor.is_alive()


def test_close_wakes_a_waiting_timer(tmp_path: Path) -> None:
    s = WindowStore(str(tmp_path / "w.db"), StoreLimits(max_age_s=600), clock=lambda: T0)
    s.start_evicting(3600.0)
    evictor = s._evictor
    assert evictor is not None and evictor.is_alive()
    s.close()  # returns without waiting out the hour
    assert not evictor.is_alive()


def test_timer_period() -> None:
    assert [evict_interval_s(StoreLimits(max_age_s=a)) for a in (7 * 24 * 3600.0, 300.0, 2.0)] == [60.0, 30.0, 1.0]


def test_daemon_store_evicts_when_it_opens(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    producer = WindowStore(str(path))  # the default limits: a week
    old = sp.windows(time.time() - 7200, 1, names=(TORCH,))  # ended 7140 s ago: past an hour's limit
    assert producer.put(old[0]) is not None
    producer.close()
    store = open_store(Config(store_path=str(path), store_max_age_s=3600.0))
    assert store is not None
    try:
        st = store.stats()
        assert (st.windows, st.counters["windows_evicted_age"]) == (0, 1)
        assert store.query(0.0) is None
    finally:
        store.close()
