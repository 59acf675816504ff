"""glibc malloc's settings for deepctxd, and handing its free memory back.

Measured on the H200 host with one PyTorch process captured (`bench/daemon_memory.py --target torch --heap`):
238.7 MB of anonymous memory, of which malloc held 146 MB freed but kept, against 47.7 MB in use. An attach
allocates and frees up to 80 MB for a moment (unwind tables read from the disk cache, numpy's work arrays),
and glibc keeps such memory: it raises its mmap threshold to the size of each mapped block freed (up to
32 MiB), so later blocks below that come from the arenas and stay there once freed.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
# A block of 256 KiB or more gets a mapping of its own and goes back to the system when freed. Setting the
# threshold also turns off glibc's raising of it (and of the trim threshold) as blocks are freed.
MMAP_THRESHOLD = 256 << 10
TRIM_THRESHOLD = 1 << 20  # free memory at the top of an arena beyond this goes back at once
ARENAS = 2


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl): its allocator hands memory back on its own
        return None


def tune() -> None:
    """At the daemon's start, before any thread: two arenas (glibc gives each new thread its own, up to 8 per
    core; with a thread per capture and LLVM compiling in them the daemon grew by tens of MB whenever a
    thread touched a fresh one), and the fixed thresholds above."""
    libc = _libc()
    if libc is None:
        return
    for param, value in ((M_ARENA_MAX, ARENAS), (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                         (M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        try:
            libc.mallopt(param, value)
        except AttributeError:
            return


def release() -> None:
    """Hands the whole free pages inside malloc's arenas back to the system (after an attach, whose peak is
    the largest, and after a capture, which frees its program's and its maps' copies): the daemon's resident
    memory then follows what it holds, not what it once held."""
    libc = _libc()
    if libc is not None:
        try:
            libc.malloc_trim(0)
        except AttributeError:
            pass
