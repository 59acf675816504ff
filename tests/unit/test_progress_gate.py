"""deepctxd sends a capture's progress at most twice a second per phase (#35.7): the capture loop reports
20 times a second while new Python stacks come in, and each event costs CPU in the daemon, its relay and the
client. A new phase's message goes at once (`deepctx run` releases its target on the first "capturing")."""

from __future__ import annotations

from deepctx.daemon.service import PROGRESS_INTERVAL_S, ProgressGate


def test_same_message_at_most_once_per_interval() -> None:
    gate = ProgressGate(interval_s=0.5)
    ticks = [i / 20 for i in range(41)]  # two seconds of a busy capture loop
    assert [t for t in ticks if gate.send("capturing", t)] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert PROGRESS_INTERVAL_S <= 1.0  # a progress bar still moves every second


def test_a_new_message_goes_at_once() -> None:
    gate = ProgressGate()
    assert gate.send("loading probes", 0.0)
    assert gate.send("capturing", 0.01)
    assert not gate.send("capturing", 0.02)
    assert gate.send("collecting", 0.03)
    assert gate.send("symbolizing", 0.04)
