"""One unwind table per file, however many processes map it.

Files are identified by GNU build id when they have one (the same library inside two containers is
one table), else by (device, inode). Tables with a build id can also be kept on disk, so a daemon
restart does not parse libtorch again.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path

import numpy as np

from deepctx.daemon.unwind.arch import X86_64
from deepctx.daemon.unwind.cfi import CfiError
from deepctx.daemon.unwind.elf import ElfError, ElfFile
from deepctx.daemon.unwind.table import UnwindTable, build_table, empty_table

log = logging.getLogger(__name__)

DISK_FORMAT = 1  # bump when the table layout or the rule encoding changes


class TableCache:
    def __init__(self, disk_dir: str | Path | None = None) -> None:
        self.disk_dir = Path(disk_dir) if disk_dir is not None else None
        self._lock = threading.Lock()
        self._by_key: dict[str, UnwindTable] = {}
        self._by_inode: dict[tuple[str, int], str] = {}
        self.counters = {"builds": 0, "hits": 0, "disk_hits": 0, "failures": 0}

    def get(self, path: str, dev: str, inode: int) -> tuple[str, UnwindTable]:
        """(file key, table) for the file at path, which has the given device and inode.

        A file that is not a readable ELF file or has no CFI gets an empty table: the walker then uses
        frame pointers in it. OSError (file gone) propagates."""
        with self._lock:
            key = self._by_inode.get((dev, inode))
            if key is not None:
                self.counters["hits"] += 1
                return key, self._by_key[key]
            try:
                with ElfFile(path) as f:
                    build_id = f.build_id()
            except ElfError:
                build_id = None
            key = f"b:{build_id}" if build_id else f"i:{dev}:{inode}"
            table = self._by_key.get(key)
            if table is not None:
                self.counters["hits"] += 1
            else:
                table = self._load(build_id) if build_id else None
                if table is not None:
                    self.counters["disk_hits"] += 1
                else:
                    table = self._build(path, build_id)
                self._by_key[key] = table
            self._by_inode[(dev, inode)] = key
            return key, table

    def _build(self, path: str, build_id: str | None) -> UnwindTable:
        try:
            table = build_table(path)
        except (ElfError, CfiError, ValueError) as e:
            log.info("no unwind table for %s: %s", path, e)
            self.counters["failures"] += 1
            return empty_table(X86_64.name, build_id)
        self.counters["builds"] += 1
        if build_id:
            self._save(build_id, table)
        return table

    def _disk_path(self, build_id: str) -> Path | None:
        if self.disk_dir is None:
            return None
        return self.disk_dir / f"{build_id}.v{DISK_FORMAT}.npz"

    def _load(self, build_id: str) -> UnwindTable | None:
        p = self._disk_path(build_id)
        if p is None or not p.exists():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                return UnwindTable(
                    arch=str(z["arch"]),
                    base=int(z["base"]),
                    pcs=z["pcs"].astype(np.uint32),
                    infos=z["infos"],
                    rules=[tuple(int(v) for v in r) for r in z["rules"]],  # type: ignore[misc]
                    build_id=build_id,
                    stats={"rows": float(len(z["pcs"])), "from_disk": 1.0},
                )
        except (OSError, KeyError, ValueError) as e:
            log.warning("ignoring unreadable cached table %s: %s", p, e)
            return None

    def _save(self, build_id: str, table: UnwindTable) -> None:
        p = self._disk_path(build_id)
        if p is None:
            return
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                np.savez(
                    f,
                    arch=np.array(table.arch),
                    base=np.array(table.base, np.uint64),
                    pcs=table.pcs,
                    infos=table.infos,
                    rules=np.array(table.rules, np.int64).reshape(-1, 7),
                )
            os.replace(tmp, p)  # readers never see a partial file
        except OSError as e:
            log.warning("cannot cache the unwind table in %s: %s", p, e)

    def __len__(self) -> int:
        return len(self._by_key)

    @property
    def memory(self) -> int:
        return sum(t.memory for t in self._by_key.values())
