"""An unwind table as a file: the daemon's disk cache and the table builder's child process share it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from deepctx.daemon.unwind.table import UnwindTable

DISK_FORMAT = 1  # bump when the table layout or the rule encoding changes


def save_table(table: UnwindTable, path: Path) -> None:
    """Writes the table to path atomically (readers never see a partial file); raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
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
    """The table saved at path (raises OSError, KeyError or ValueError for a missing or unreadable file)."""
    with np.load(path, allow_pickle=False) as z:
        return UnwindTable(
            arch=str(z["arch"]),
            base=int(z["base"]),
            pcs=z["pcs"].astype(np.uint32),
            infos=z["infos"],
            rules=[tuple(int(v) for v in r) for r in z["rules"]],  # type: ignore[misc]
            build_id=build_id,
            stats={"rows": float(len(z["pcs"]))},
        )
