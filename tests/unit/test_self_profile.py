"""The daemon's self-profiler (DEEPCTX_SELF_PROFILE): running threads' stacks counted, waiting ones left out."""

from __future__ import annotations

import threading
from pathlib import Path

from deepctx.daemon.self_profile import SelfProfiler


def spin_for_the_profiler(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(1000))


def test_running_thread_is_sampled_and_a_waiting_one_is_not(tmp_path: Path) -> None:
    out = tmp_path / "self.folded"
    prof = SelfProfiler(str(out))
    stop, sampled, release = threading.Event(), threading.Event(), threading.Event()
    busy = threading.Thread(target=spin_for_the_profiler, args=(stop,), name="busy")
    idle = threading.Thread(target=release.wait, name="idle")  # waits until the sampler has stopped
    busy.start()
    idle.start()
    prof.start()
    try:
        # until the sampler has seen the busy thread running a few times (no sleeps as synchronization)
        while not sampled.wait(0.05):
            if sum(n for s, n in list(prof.stacks.items()) if s.startswith("busy;")) >= 5:
                sampled.set()
    finally:
        stop.set()
        busy.join()
        prof.stop()
        release.set()
        idle.join()
    lines = out.read_text().splitlines()
    comments = [x for x in lines if x.startswith("# ")]
    stacks = [x for x in lines if not x.startswith("# ")]
    assert any(x.startswith("# busy (tid ") for x in comments)
    busy_stacks = [x for x in stacks if x.startswith("busy;")]
    assert busy_stacks and all("spin_for_the_profiler (test_self_profile.py:" in x for x in busy_stacks)
    assert not any(x.startswith("idle;") for x in stacks)
    assert sum(int(x.rsplit(" ", 1)[1]) for x in busy_stacks) >= 5
