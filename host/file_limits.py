"""Caps on what deepctxd spends on files that users' targets map (any user can make a process map a
crafted library): bytes of one section read or decompressed into memory, and rows of one unwind table.

Every decompression is streamed with zlib's max_length, so a section that lies about its size (or a zlib
bomb) never yields more than the cap plus one byte. Set once at start from the config (configure); the
table builder's child process gets them on its command line.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

DEFAULT_MAX_DECOMPRESSED_BYTES = 256 << 20  # libtorch_cuda's .eh_frame is far below this
DEFAULT_MAX_UNWIND_ROWS = 1 << 24  # libtorch_cpu's table has 2.6M rows


class OverCap(ValueError):
    """A file's section or table is over one of the caps: it is refused, not read."""


@dataclass
class FileLimits:
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    max_unwind_rows: int = DEFAULT_MAX_UNWIND_ROWS


LIMITS = FileLimits()  # the daemon's one set, read where sections are read and tables built


def configure(max_decompressed_bytes: int, max_unwind_rows: int) -> None:
    LIMITS.max_decompressed_bytes = max_decompressed_bytes
    LIMITS.max_unwind_rows = max_unwind_rows


def check_size(size: int, what: str, cap: int | None = None) -> None:
    """Raises OverCap when a section of `size` bytes (after decompression) is over the cap."""
    cap = LIMITS.max_decompressed_bytes if cap is None else cap
    if size > cap:
        raise OverCap(f"{what} is {size} bytes once decompressed, over the cap of {cap} bytes "
                      f"(max_decompressed_bytes): refused")


def inflate(compressed: bytes, declared: int, what: str, cap: int | None = None) -> bytes:
    """zlib data that declares `declared` bytes: at most that many are produced (one more shows a lie).
    Raises OverCap over the cap, ValueError for corrupt data or a size that is not the declared one."""
    check_size(declared, what, cap)
    d = zlib.decompressobj()
    try:
        out = d.decompress(compressed, declared + 1)
    except zlib.error as e:
        raise ValueError(f"{what}: corrupt compressed data ({e})") from None
    if len(out) != declared:
        raise ValueError(f"{what}: decompresses to {'more' if len(out) > declared else 'fewer'} bytes "
                         f"than the {declared} it declares")
    return out
