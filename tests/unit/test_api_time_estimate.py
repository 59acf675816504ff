"""Launch API time measured on 1 call in N of each call path (gpu_api_time_every) and scaled to all its calls."""

from __future__ import annotations

import pytest

from deepctx.probes.gpu_api import GpuApi, GpuVal, api_time_ns


def test_every_call_timed_is_the_time_as_measured() -> None:
    assert api_time_ns(GpuVal(calls=5, time_ns=5000, bytes=0, timed=5)) == 5000


def test_one_in_eight_timed_is_scaled_to_all_calls() -> None:
    # 20 calls, timed at 0, 8 and 16: 3 timed calls of 1,000 ns each -> 20,000 ns
    assert api_time_ns(GpuVal(calls=20, time_ns=3000, bytes=0, timed=3)) == 20000


def test_calls_counted_at_entry_only_have_no_time() -> None:
    assert api_time_ns(GpuVal(calls=9, time_ns=0, bytes=0, timed=0)) == 0


def test_the_first_call_counts_once() -> None:
    # 20 calls, timed at 0 (apart: 50,000 ns, the runtime loading), 8 and 16 (1,000 ns each): the 19 after the
    # first scaled from the two -> 50,000 + 19,000; scaled with the others it would have made 3 x 17,333
    assert api_time_ns(GpuVal(calls=20, time_ns=2000, bytes=0, timed=2, first_ns=50_000)) == 69_000
    # every call timed: the sum as measured
    assert api_time_ns(GpuVal(calls=5, time_ns=4000, bytes=0, timed=4, first_ns=7_000)) == 11_000
    # only the first timed (fewer calls than the period): it stands for all of them
    assert api_time_ns(GpuVal(calls=3, time_ns=0, bytes=0, timed=0, first_ns=2_000)) == 6_000
    assert api_time_ns(GpuVal(calls=1, time_ns=0, bytes=0, timed=0, first_ns=2_001)) == 2_001


@pytest.mark.parametrize("every", [0, 3, 6, 12])
def test_the_family_takes_only_powers_of_two(every: int) -> None:  # the BPF side masks with every - 1
    with pytest.raises(ValueError, match="power of two"):
        GpuApi(api_time_every=every)


@pytest.mark.parametrize("every", [1, 2, 8, 64])
def test_powers_of_two_are_taken(every: int) -> None:
    assert GpuApi(api_time_every=every).api_time_every == every


@pytest.mark.parametrize(("release", "has"), [("6.1.0-57-amd64", False), ("6.12.9", False), ("6.13.0", True),
                                              ("6.18.44-fc-v1252-gpu", True), ("7.0.1", True), ("weird", False)])
def test_uprobe_sessions_are_known_by_the_kernel_release(monkeypatch: pytest.MonkeyPatch, release: str,
                                                         has: bool) -> None:
    import os

    from deepctx.probes import uprobes

    real = os.uname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result((real.sysname, real.nodename, release, real.version,
                                                                real.machine)))
    uprobes.uprobe_sessions.cache_clear()
    try:
        assert uprobes.uprobe_sessions() is has
        assert (uprobes.UprobeAttacher(None, "e", "r", session_fn="s").session is None) is has
    finally:
        uprobes.uprobe_sessions.cache_clear()
