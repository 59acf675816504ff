"""A capture on behalf of a caller outside root and the `deepctx` group stays allowed only while the
target runs as it did when it was authorized.

The decision at request time does not hold for the whole capture: the target may exec a setuid program or
a thread may change its credentials. The capture loop asks `check()` at least once a CHECK_INTERVAL_S and
once more before it builds anything; a change ends the capture and the caller gets no profile (samples
taken after the change may already sit in the BPF maps, and cannot be told apart from the earlier ones).
A change undone between two checks is not seen, nor one made right before the target exits.
"""

from __future__ import annotations

import time

from deepctx.daemon import access, credentials
from deepctx.daemon.access import Identity

CHECK_INTERVAL_S = 1.0


class CredentialGuard:
    def __init__(self, caller: Identity, pid: int) -> None:
        """Takes the baseline now: call it before the authorization, so that a change after the baseline
        and before the kernel's answer is seen by the first check."""
        self.caller = caller
        self.pid = pid
        self.baseline = credentials.fingerprint(pid)
        self.last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.last >= CHECK_INTERVAL_S

    def check(self) -> str | None:
        """Why the capture must end and return nothing (None: it may go on)."""
        self.last = time.monotonic()
        now = credentials.fingerprint(self.pid)
        if now is None:
            return None  # gone: nothing more runs under other credentials (see the module's docstring)
        if self.baseline is None or self.baseline.differs(now):
            return (f"process {self.pid} changed its credentials during the capture (exec of a setuid program?): "
                    "deepctx stopped and returns nothing")
        try:
            why = access.memory_refusal(self.caller, self.pid)
        except access.AccessCheckFailed as e:
            why = str(e)
        if why is not None and credentials.fingerprint(self.pid) is not None:
            return (f"process {self.pid} may no longer be read by the caller ({why}): deepctx stopped and returns "
                    "nothing")
        return None
