"""Ctrl-C and SIGTERM in a process whose main thread waits: the handler notes the signal without a lock, and
the wait looks for the note a slice at a time.

Python runs a signal's handler in the main thread between two bytecodes, possibly inside an Event's wait that
holds the Event's lock: a handler that set an Event there deadlocked (`deepctx top` ran on 35 s after SIGINT in
CI, its stack in threading's lock twice, wait() under set()). And when the kernel hands the signal to another
thread (gRPC's), a wait without a timeout never wakes for it: the waits here end every SLICE_S."""

from __future__ import annotations

import threading
import time

SLICE_S = 0.2  # the longest a signal waits for its note to be read


class Interrupt:
    """A signal handler (signal.signal(SIGINT, interrupt)) that only notes which signal came."""

    def __init__(self) -> None:
        self.signum = 0

    def __call__(self, signum: int, _frame: object = None) -> None:
        self.signum = signum

    @property
    def hit(self) -> bool:
        return self.signum != 0


def wait_in_slices(stop: Interrupt, event: threading.Event | None = None, seconds: float | None = None) -> bool:
    """Waits for event (None: for the signal alone) at most `seconds` (None: no end), a slice at a time. True
    when the event is set or the signal came."""
    waited = event if event is not None else threading.Event()
    end = None if seconds is None else time.monotonic() + seconds
    while True:
        if stop.hit:
            return True
        left = SLICE_S if end is None else min(SLICE_S, end - time.monotonic())
        if waited.wait(max(left, 0.0)):
            return True
        if end is not None and time.monotonic() >= end:
            return stop.hit
