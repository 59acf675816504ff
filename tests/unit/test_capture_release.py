"""A capture's end: probes detached behind a built profile (and waited for at the daemon's exit), and
`deepctx stop` waking the capture loop through its pipe."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from deepctx.daemon import capture
from deepctx.daemon.capture import Capture, CaptureOptions, CaptureResult, _release, wait_released
from deepctx.daemon.errors import NotFound
from deepctx.daemon.probe_set import ProbeSet
from deepctx.daemon.symbolize.native import SymbolCache
from deepctx.host import procfs
from deepctx.probes.family import Target


def release(session: int, target: Target, fams: list, calls: list[str], background: bool,
            delivered: threading.Event | None = None) -> None:
    """_release as a capture calls it: its ProbeSet's detach, then the program back to the pool (noted
    "kept" when every detach went well, else "freed")."""
    probes = ProbeSet(CaptureOptions(duration_s=1, sample_hz=99), fams)
    _release(session, target, lambda: probes.detach(object(), target),
             lambda clean: calls.append("kept" if clean else "freed"), background=background, delivered=delivered)


class FakeFamily:
    """detach() notes the call, then blocks until `go` is set (a slow detach, as on a GPU process)."""

    def __init__(self, name: str, calls: list[str], go: threading.Event, fail: bool = False) -> None:
        self.name, self.calls, self.go, self.fail = name, calls, go, fail

    def detach(self, bpf: object, target: Target) -> None:
        self.calls.append(f"{self.name} detach {target.pid}")
        assert self.go.wait(10)
        if self.fail:
            raise RuntimeError("detach failed")


def test_a_built_profile_does_not_wait_for_its_probes_to_detach() -> None:
    calls: list[str] = []
    go = threading.Event()
    fams = [FakeFamily("gpu", calls, go), FakeFamily("cpu", calls, go)]
    release(7, Target(4242, None, None), fams, calls, background=True)  # type: ignore[arg-type]
    # returned while the first detach is still blocked
    assert "kept" not in calls
    assert wait_released(0.05) is False
    go.set()
    assert wait_released(10) is True
    assert calls == ["gpu detach 4242", "cpu detach 4242", "kept"]
    assert not capture._releasing


def test_probes_detach_once_the_profile_is_delivered() -> None:
    """The release thread waits for the capture's `delivered` event: each detach sees it set (a detach that
    ran during the send would see it clear: it is set only below, after the release has started)."""
    calls: list[str] = []
    go, delivered = threading.Event(), threading.Event()
    go.set()
    seen: list[bool] = []

    class Family(FakeFamily):
        def detach(self, bpf: object, target: Target) -> None:
            seen.append(delivered.is_set())
            super().detach(bpf, target)

    fams = [Family("gpu", calls, go), Family("cpu", calls, go)]
    release(9, Target(77, None, None), fams, calls, background=True, delivered=delivered)  # type: ignore[arg-type]
    assert wait_released(0.05) is False and calls == []
    delivered.set()
    assert wait_released(10) is True
    assert seen == [True, True] and calls == ["gpu detach 77", "cpu detach 77", "kept"]


def test_a_failed_capture_detaches_before_returning_and_a_failing_family_does_not_stop_the_rest() -> None:
    calls: list[str] = []
    go = threading.Event()
    go.set()
    fams = [FakeFamily("gpu", calls, go, fail=True), FakeFamily("cpu", calls, go)]
    release(8, Target(99, None, None), fams, calls, background=False)  # type: ignore[arg-type]
    # the program whose detach failed is freed, not handed to the next capture
    assert calls == ["gpu detach 99", "cpu detach 99", "freed"]
    assert wait_released(0) is True


def test_request_stop_sets_the_flag_and_wakes_the_loop() -> None:
    cap = Capture(1, os.getpid(), CaptureOptions(duration_s=600, sample_hz=99), SymbolCache(), threading.Event())
    cap.request_stop()  # before the loop runs: the flag alone (the loop checks it first)
    assert cap.stop_requested.is_set()
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        cap._wake = w  # the loop's pipe, as _run sets it
        cap.request_stop()
        assert os.read(r, 16) == b"s"
    finally:
        cap._wake = None
        os.close(r)
        os.close(w)


class WindowFamily:
    """Notes each window's take and clear."""

    def __init__(self, calls: list[str]) -> None:
        self.name, self.calls = "gpu", calls

    def take_window(self, bpf: object, target: object, cut: int) -> None:
        self.calls.append(f"take {cut}")

    def clear_window(self, bpf: object, target: object, stacks_free: bool) -> None:
        self.calls.append(f"clear {stacks_free}")


def test_a_window_whose_build_fails_is_counted_and_the_next_is_cut_as_usual(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counts a failed window took are released (the next window reads the maps again), the capture goes
    on, and the loss is counted for the next window's stats and warnings."""
    calls: list[str] = []
    stored: list[float] = []
    c = Capture(1, 4242, CaptureOptions(duration_s=600, sample_hz=19), SymbolCache(), threading.Event(),
                on_window=lambda result, start, end: stored.append(start))
    c.probes = ProbeSet(c.opts, [WindowFamily(calls)])  # type: ignore[list-item]
    builds = iter([RuntimeError("a build that fails"), None])

    def build(*_: object) -> object:
        outcome = next(builds)
        if outcome is not None:
            raise outcome
        calls.append("build")
        return capture.CaptureResult(pid=4242, command="t", duration_s=1.0, started_unix=0.0, ended="window",
                                     sample_hz=19, tree=None, stats={}, warnings=[])  # type: ignore[arg-type]

    monkeypatch.setattr(c, "_build", build)
    target = Target(4242, None, None)  # type: ignore[arg-type]
    c._cut_window(object(), target, {}, 1.0, 100.0, 7)
    assert (calls, stored, c.windows_lost) == (["take 7", "clear True"], [], 1)
    c._cut_window(object(), target, {}, 1.0, 101.0, 8)
    assert (calls[2:], stored, c.windows_lost) == (["take 8", "build", "clear True"], [101.0], 1)
    assert capture.stat_warnings({"continuous_windows_lost": 1}) == [
        "1 continuous windows could not be built and are missing (deepctxd's log says why)"]


def test_a_target_gone_while_being_prepared_is_not_found_and_a_live_ones_error_stays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that exits while its files and memory are read (continuous mode picks up short-lived GPU
    processes) ends its capture as NotFound with a clear message, not as the failed read; the same error
    from a process still running is not hidden."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        cap = Capture(1, child.pid, CaptureOptions(duration_s=600, sample_hz=19), SymbolCache(), threading.Event())

        def still_running(*_: object) -> CaptureResult:
            raise FileNotFoundError(2, "a map file went away")

        monkeypatch.setattr(cap, "_run", still_running)
        with pytest.raises(FileNotFoundError):
            cap.run(lambda _p: None, lambda: False)

        def exits_meanwhile(*_: object) -> CaptureResult:
            child.kill()
            child.wait()
            procfs.ProcessMemory(child.pid)  # the read that fails for real: the process is gone
            raise AssertionError("read the memory of a process that was reaped")

        monkeypatch.setattr(cap, "_run", exits_meanwhile)
        with pytest.raises(NotFound, match=f"process {child.pid} exited while deepctx was attaching to it"):
            cap.run(lambda _p: None, lambda: False)
    finally:
        child.kill()
        child.wait()
