"""A capture's end: probes detached behind a built profile (and waited for at the daemon's exit), and
`deepctx stop` waking the capture loop through its pipe."""

from __future__ import annotations

import os
import threading

from deepctx.daemon import capture
from deepctx.daemon.capture import Capture, CaptureOptions, _release, wait_released
from deepctx.daemon.symbolize.native import SymbolCache
from deepctx.probes.family import Target


class FakeBpf:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def cleanup(self) -> None:
        self.calls.append("cleanup")


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
    _release(7, Target(4242, None, None), fams, FakeBpf(calls), background=True)  # type: ignore[arg-type]
    # returned while the first detach is still blocked
    assert "cleanup" not in calls
    assert wait_released(0.05) is False
    go.set()
    assert wait_released(10) is True
    assert calls == ["gpu detach 4242", "cpu detach 4242", "cleanup"]
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
    _release(9, Target(77, None, None), fams, FakeBpf(calls), background=True,  # type: ignore[arg-type]
             delivered=delivered)
    assert wait_released(0.05) is False and calls == []
    delivered.set()
    assert wait_released(10) is True
    assert seen == [True, True] and calls == ["gpu detach 77", "cpu detach 77", "cleanup"]


def test_a_failed_capture_detaches_before_returning_and_a_failing_family_does_not_stop_the_rest() -> None:
    calls: list[str] = []
    go = threading.Event()
    go.set()
    fams = [FakeFamily("gpu", calls, go, fail=True), FakeFamily("cpu", calls, go)]
    _release(8, Target(99, None, None), fams, FakeBpf(calls), background=False)  # type: ignore[arg-type]
    assert calls == ["gpu detach 99", "cpu detach 99", "cleanup"]
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
