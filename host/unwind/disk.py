"""An unwind table as a file: the daemon's disk cache and the table builder's child process share it.

Tables are written 0600 through a fresh O_EXCL name and renamed into place; they are read without
following a link, and only from a regular file that deepctxd owns (the cache folder is root's, 0700)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from deepctx.host.unwind.table import UnwindTable

DISK_FORMAT = 2  # bump when the table layout, the rule encoding or the naming (content hash) changes


def save_table(table: UnwindTable, path: Path) -> None:
    """Writes the table to path atomically (readers never see a partial file); raises OSError."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, arch=np.array(table.arch), base=np.array(table.base, np.uint64), pcs=table.pcs,
                     infos=table.infos, rules=np.array(table.rules, np.int64).reshape(-1, 7))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_table(path: Path, build_id: str | None) -> UnwindTable:
    """The table saved at path (raises OSError, KeyError or ValueError for a missing or unreadable file,
    a link, or a file that is not deepctxd's own)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise ValueError(f"{path} is not a regular file of deepctxd's own")
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
