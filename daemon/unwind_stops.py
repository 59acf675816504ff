"""Why a native (.eh_frame) walk ended short of the thread's entry, from the walker's stack flags: the
marker frame that says so. Only the depth limit is [truncated]; a walk that met code with no unwind table,
an unreadable stack or a rule it cannot evaluate stopped for that reason, and its marker names it."""

from __future__ import annotations

from deepctx.host.frames import TRUNCATED, UNWIND_STOPPED, Frame
from deepctx.probes.native_unwind import (
    NATIVE_F_BAD_FRAME,
    NATIVE_F_COMPLETE,
    NATIVE_F_NO_PROC,
    NATIVE_F_NO_TABLE,
    NATIVE_F_READ_ERROR,
    NATIVE_F_TRUNCATED,
    NATIVE_F_UNSUPPORTED,
)

# first match wins: the walker sets one of these where it stopped
_REASONS = ((NATIVE_F_NO_TABLE, "no_table"), (NATIVE_F_READ_ERROR, "read_error"),
            (NATIVE_F_UNSUPPORTED, "unsupported"), (NATIVE_F_BAD_FRAME, "bad_frame"), (NATIVE_F_NO_PROC, "no_proc"))


def stop_marker(flags: int) -> Frame | None:
    """The frame that stands above a stack with these NATIVE_F_* flags, None for a complete walk."""
    if flags & NATIVE_F_TRUNCATED:
        return TRUNCATED
    if flags & NATIVE_F_COMPLETE:
        return None
    for bit, reason in _REASONS:
        if flags & bit:
            return UNWIND_STOPPED[reason]
    return UNWIND_STOPPED["other"]
