"""WindowStore on recorded H200 profiles: exact merged metrics, filters, top, eviction by age and size."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import store_producer as sp

from deepctx.daemon.store import StoreLimits, WindowStore
from deepctx.daemon.store.sqlite import StoreError
from deepctx.profiles.summary import summarize

T0 = 1_800_000_000.0
TORCH, TRITON, JAX = sp.NAMES


def nodes(doc: dict) -> int:
    n, stack = 0, [doc["root"]]
    while stack:
        x = stack.pop()
        n += 1
        stack.extend(x["children"])
    return n


@pytest.fixture
def store(tmp_path: Path) -> WindowStore:
    s = WindowStore(str(tmp_path / "w.db"), clock=lambda: T0 + 3600)
    for w in sp.windows(T0, per_fixture=4):
        assert s.put(w) is not None
    return s


def test_query_adds_every_window_exactly(store: WindowStore) -> None:
    for name in sp.NAMES:
        fx = sp.fixture(name)
        doc = store.query(T0, T0 + 3600, pid=fx["pid"])
        assert doc is not None
        assert doc["stats"]["windows"] == 4
        assert sp.totals(doc) == {k: 4 * v for k, v in sp.totals(fx).items()}
        assert nodes(doc) == nodes(fx)  # same paths merged, none duplicated
        assert (doc["pid"], doc["command"], doc["ended"]) == (fx["pid"], fx["command"], "windows")
        assert doc["started_unix"] == T0 and doc["duration_s"] == 4 * 60.0
    everything = store.query(T0, T0 + 3600)
    assert everything["pid"] == 0 and everything["root"]["name"] == "[3 processes]"
    assert sp.totals(everything) == {k: 4 * sum(sp.totals(sp.fixture(n))[k] for n in sp.NAMES)
                                     for k in everything["metrics"]}


def test_one_window_is_the_profile_itself(store: WindowStore) -> None:
    fx = sp.fixture(TORCH)
    doc = store.query(T0, T0 + 30, pid=fx["pid"])  # overlaps only the first window
    assert doc["stats"]["windows"] == 1
    assert doc["root"]["children"] == fx["root"]["children"]


def test_filters(store: WindowStore) -> None:
    jax = sp.fixture(JAX)
    assert store.query(T0, T0 + 3600, command="jax_jit.py")["pid"] == jax["pid"]
    assert store.query(T0, T0 + 3600, container=sp.CONTAINERS[TORCH][:12])["pid"] == sp.fixture(TORCH)["pid"]
    assert store.query(T0, T0 + 3600, container="/user.slice")["pid"] == jax["pid"]
    assert store.query(T0 + 60, T0 + 120)["stats"]["windows"] == 3  # the second window of each fixture
    assert store.query(T0 + 240, T0 + 3600) is None  # windows end at T0 + 240: none overlaps
    assert store.query(T0, T0 + 3600, pid=1) is None
    assert store.query(T0, T0 + 3600, uid=1000) is None  # every window belongs to uid 0


def test_uid_sees_only_its_windows(tmp_path: Path) -> None:
    s = WindowStore(str(tmp_path / "w.db"), clock=lambda: T0 + 3600)
    for w in sp.windows(T0, 2, names=(TORCH,), uid=0) + sp.windows(T0, 3, names=(TRITON,), uid=1000):
        s.put(w)
    mine = s.query(T0, T0 + 3600, uid=1000)
    assert (mine["pid"], mine["stats"]["windows"]) == (sp.fixture(TRITON)["pid"], 3)
    top = s.top(T0, 10, T0 + 3600, uid=1000)
    assert [p.pid for p in top.processes] == [sp.fixture(TRITON)["pid"]]
    assert {k.name for k in top.kernels} == {"deepctx_add_kernel"}


def test_top_ranks_processes_kernels_and_lines(store: WindowStore) -> None:
    r = store.top(T0, 3, T0 + 3600)
    assert (r.windows, r.sort, r.kernel_sort) == (12, "cpu_samples", "calls")  # no device times recorded
    assert [p.pid for p in r.processes] == [sp.fixture(n)["pid"] for n in (JAX, TRITON, TORCH)]
    torch = next(p for p in r.processes if p.pid == sp.fixture(TORCH)["pid"])
    # 1000 elementwise + 50 reduce + 1 normal + 20 + 20 gemm launches per window; 50 copies of 4 bytes
    assert (torch.windows, torch.metrics["launches"], torch.metrics["copy_bytes"]) == (4, 4 * 1091, 4 * 200)
    assert torch.container == sp.CONTAINERS[TORCH]
    top_kernel = r.kernels[0]
    assert top_kernel.name.startswith("_ZN2at6native29vectorized_elementwise_kernel")
    assert (top_kernel.metrics["calls"], top_kernel.processes) == (4000, 1)
    # the line with the most CPU samples, computed independently of the store
    best: dict[tuple, int] = {}
    for name in sp.NAMES:
        for key, m in summarize(sp.fixture(name)).lines.items():
            best[key] = best.get(key, 0) + 4 * m["cpu_samples"]
    (file, line, function), samples = max(best.items(), key=lambda kv: kv[1])
    assert (r.lines[0].file, r.lines[0].line, r.lines[0].function, r.lines[0].metrics["cpu_samples"]) == (
        file, line, function, samples)
    assert r.lines[0].file.endswith("triton/runtime/cache.py") and samples == 4 * 44
    assert [p.pid for p in store.top(T0, 1, T0 + 3600, sort="calls").processes] == [sp.fixture(TORCH)["pid"]]
    with pytest.raises(ValueError, match="unknown metric"):
        store.top(T0, 3, T0 + 3600, sort="bogus")


def test_age_eviction_is_counted(tmp_path: Path) -> None:
    now = [T0]
    s = WindowStore(str(tmp_path / "w.db"), StoreLimits(max_age_s=600), clock=lambda: now[0])
    for w in sp.windows(T0 - 3000, 5, names=(TORCH,)):  # ends T0-2940 ... T0-2700: all older than 600 s
        s.put(w)
    assert s.stats().windows == 0 and s.stats().counters["windows_evicted_age"] == 5
    for w in sp.windows(T0 - 300, 5, names=(TORCH,)):  # ends T0-240 ... T0: all kept
        s.put(w)
    now[0] = T0 + 400  # windows ending before T0-200 are now too old: the first one
    s.evict()
    st = s.stats()
    assert (st.windows, st.counters["windows_evicted_age"], st.counters["windows_put"]) == (4, 6, 10)


def test_size_limit_holds_for_the_file(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    limit = 1024 * 1024
    s = WindowStore(str(path), StoreLimits(max_bytes=limit), clock=lambda: T0 + 86400)
    ws = sp.windows(T0, 16, names=(JAX,))  # ~110 kB each compressed, with summaries
    ids = []
    for w in ws:
        ids.append(s.put(w))
        assert os.path.getsize(path) <= limit
    st = s.stats()
    assert st.file_bytes == os.path.getsize(path)
    assert st.counters["windows_evicted_size"] == 16 - st.windows > 0
    # the newest windows stayed
    kept = s.query(T0, T0 + 86400)
    assert kept["stats"]["windows"] == st.windows
    assert kept["started_unix"] == ws[16 - st.windows].start_unix
    assert None not in ids


def test_window_larger_than_a_quarter_of_the_limit_is_refused(tmp_path: Path) -> None:
    s = WindowStore(str(tmp_path / "w.db"), StoreLimits(max_bytes=256 * 1024), clock=lambda: T0)
    assert s.put(sp.windows(T0, 1, names=(JAX,))[0]) is None
    assert s.stats().counters["windows_rejected_too_large"] == 1 and s.stats().windows == 0


def test_listeners_see_each_window_with_its_summary(store: WindowStore) -> None:
    seen = []
    store.add_listener(lambda w, summary: seen.append((w.pid, summary.launches)))
    store.put(sp.windows(T0 + 600, 1, names=(TORCH,))[0])
    assert seen == [(sp.fixture(TORCH)["pid"], 1091)]


def test_reopen_keeps_windows_and_counters(tmp_path: Path) -> None:
    path = str(tmp_path / "w.db")
    s = WindowStore(path, clock=lambda: T0)
    s.put(replace(sp.windows(T0 - 60, 1, names=(TORCH,))[0]))
    s.close()
    again = WindowStore(path, clock=lambda: T0)
    assert again.stats().windows == 1 and again.stats().counters["windows_put"] == 1
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError, match="not a usable window store"):
        WindowStore(str(path))
