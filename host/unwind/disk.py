"""An unwind table as a file: the daemon's disk cache and the table builder's child process share it.

Written and read as deepctxd's private files (host/private_files.py: 0600 through a fresh name renamed into
place; read without following a link, only from a regular file that deepctxd owns)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import numpy as np

from deepctx.host.private_files import open_private, replace_private
from deepctx.host.unwind.table import UnwindTable

DISK_FORMAT = 2  # bump when the table layout, the rule encoding or the naming (content hash) changes


def save_table(table: UnwindTable, path: Path) -> None:
    """Writes the table to path atomically (readers never see a partial file); raises OSError."""
    def write(f: BinaryIO) -> None:
        np.savez(f, arch=np.array(table.arch), base=np.array(table.base, np.uint64), pcs=table.pcs,
                 infos=table.infos, rules=np.array(table.rules, np.int64).reshape(-1, 7))

    replace_private(path, write)


def load_table(path: Path, build_id: str | None) -> UnwindTable:
    """The table saved at path (raises OSError, KeyError or ValueError for a missing or unreadable file,
    a link, or a file that is not deepctxd's own)."""
    with open_private(path) as f:
        return _read(f, build_id)


def _read(f: BinaryIO, build_id: str | None) -> UnwindTable:
    with np.load(f, allow_pickle=False) as z:  # each z[name] reads the array from the file again: once each
        pcs = z["pcs"].astype(np.uint32, copy=False)  # saved as uint32: no second copy (the attach's peak)
        return UnwindTable(
            arch=str(z["arch"]),
            base=int(z["base"]),
            pcs=pcs,
            infos=z["infos"],
            rules=[tuple(int(v) for v in r) for r in z["rules"]],  # type: ignore[misc]
            build_id=build_id,
            stats={"rows": float(len(pcs))},
        )
