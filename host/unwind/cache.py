"""One unwind table per file, however many processes map it.

Tables live in the daemon's per-file cache (host/file_cache.py), found by the file's identity (its build
id, or a hash of its content: host/file_identity.py), so a library replaced at the same path is read again.
Built tables are also named by what they are built from: a hash of the machine, the build id and the stored
bytes of .eh_frame and .debug_frame (the same library inside two containers is one table; a crafted file
that copies another's build id is not). That name is the table's key in the walker's maps and on disk (a
root-only folder), so a daemon restart does not parse libtorch again. Files without those sections get
an empty table keyed by (device, inode). Sections over max_decompressed_bytes and tables over
max_unwind_rows are refused (host/file_limits.py): the file gets an empty table with a warning for the
profile. Files with large unwind sections (decompressed, BACKGROUND_MIN_BYTES) are built in the background:
`ready` tells a caller which files need such a build, so that it can start them instead of waiting; several
files are built at once by get_many. The largest (child_min_bytes: libtorch_cpu.so's 17 MiB) are built in a
child process (host/unwind/build_child.py), whose transient arrays then never count in the daemon's memory;
without the C row builder (host/unwind/native_rows.py) every large file is, since interpreting its CFI in
Python makes millions of objects whose memory the allocator keeps. A table with a copy on disk is held only while a
capture uses it (the walker's maps hold its rows once placed; the per-file cache keeps its key, not its
rows): the next capture reads it from disk again. Tables without a copy on disk are held under the
cache's budget. The files captures used are recorded, last use first (host/unwind/recent.py): a restarted
daemon reads their tables ahead with load_ahead, which reads only what the disk holds, builds nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from deepctx.host.elf.reader import ElfError, ElfFile
from deepctx.host.file_cache import FileCache
from deepctx.host.file_limits import LIMITS, OverCap, check_size
from deepctx.host.private_files import private_dir
from deepctx.host.unwind import native_rows
from deepctx.host.unwind.arch import X86_64
from deepctx.host.unwind.build_child import NO_TABLE, OVER_CAP
from deepctx.host.unwind.cfi import CfiError
from deepctx.host.unwind.disk import DISK_FORMAT, load_table, save_table
from deepctx.host.unwind.recent import RecentFile, RecentFiles
from deepctx.host.unwind.table import UnwindTable, build_table, empty_table

log = logging.getLogger(__name__)

BACKGROUND_MIN_BYTES = 1 << 20  # .eh_frame + .debug_frame from which a missing table is built in the background
# ... and in a child process: with the C rows only the largest files (a child's start costs about 0.2 CPU-s:
# ten of a PyTorch process's files have over 1 MiB, one over 8 MiB); interpreted in Python, every large one
CHILD_MIN_BYTES = 8 << 20
CHILD_MIN_BYTES_PYTHON = 1 << 20
CHILD_TIMEOUT_S = 600.0
UNWIND_SECTIONS = (".eh_frame", ".debug_frame")
SCRATCH_PREFIX = "deepctx-unwind-"  # a child build's folder in the disk cache
KIND = "unwind"  # entries of the per-file cache


class NotCached(LookupError):
    """A table asked for without a build (load_ahead) is neither in memory nor on disk."""


@dataclass(eq=False)
class _FileTables:
    """A file's entry in the per-file cache: its table's key, and the table itself unless a copy is on
    disk (then the table is found through TableCache._tables while a capture holds it, else on disk)."""

    key: str
    table: UnwindTable | None
    build_id: str | None
    base: int = 0  # the table's link-time base (UnwindTable.base): what a mapping entry needs beside its rows

    @property
    def nbytes(self) -> int:
        return sys.getsizeof(self.key) + (self.table.memory if self.table is not None else 0)


class TableCache:
    def __init__(self, disk_dir: str | Path | None = None, child_min_bytes: int | None = None,
                 workers: int = 4, files: FileCache | None = None) -> None:
        self.disk_dir = private_dir(Path(disk_dir), "unwind tables") if disk_dir is not None else None
        if child_min_bytes is None:
            child_min_bytes = CHILD_MIN_BYTES if native_rows.library() is not None else CHILD_MIN_BYTES_PYTHON
        self.child_min_bytes = child_min_bytes
        self.workers = max(1, workers)
        # the daemon passes its shared cache; a cache of its own otherwise (tests, benchmarks)
        self.files = files if files is not None else FileCache()
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()  # one read of a table from disk at a time: no two copies
        # one large build in the daemon at a time: each holds arrays of about 40 bytes a row while it sorts them
        # (four at once took a new host's first PyTorch process to a 291 MB peak, 204 MB with child processes)
        self._large_build_lock = threading.Lock()
        self._tables: weakref.WeakValueDictionary[str, UnwindTable] = weakref.WeakValueDictionary()  # by key
        self.counters = {"builds": 0, "hits": 0, "disk_hits": 0, "failures": 0, "child_builds": 0,
                         "over_cap": 0}
        self.recent = RecentFiles(self.disk_dir)  # the files captures used, for a restarted daemon's prewarm
        self._remove_stale_scratch()

    def _remove_stale_scratch(self) -> None:
        """Scratch folders of builds that ended with their daemon (killed mid-build) go; a folder younger
        than the builder's timeout may belong to a build of another daemon sharing the cache, and stays."""
        if self.disk_dir is None or not self.disk_dir.is_dir():
            return
        now = time.time()
        for d in self.disk_dir.glob(f"{SCRATCH_PREFIX}*"):
            try:
                if d.is_dir() and now - d.stat().st_mtime > CHILD_TIMEOUT_S + 60:
                    shutil.rmtree(d)
                    log.info("removed a stale unwind build folder", extra={"path": str(d)})
            except OSError as e:  # another daemon removed it first, or no permission: leave it
                log.debug("stale unwind build folder left", extra={"path": str(d), "error": str(e)})

    def get(self, path: str, dev: str, inode: int, name: str | None = None,
            build: bool = True) -> tuple[str, UnwindTable]:
        """(table key, table) for the file at path, which has the given device and inode.

        A file that is not a readable ELF file or has no CFI gets an empty table: the walker then uses
        frame pointers in it. OSError (file gone) propagates. Safe from several threads: a file being
        built is waited for, not built twice. name: where the target maps the file, recorded as a recent use
        (None: no use recorded). build False: NotCached where the table is neither in memory nor on disk."""
        ident = self.files.identify(path)
        built: list[UnwindTable] = []  # holds a table built here until it is returned

        def resolve() -> _FileTables:
            entry, table = self._resolve(path, dev, inode, build)
            built.append(table)
            return entry

        entry = self.files.get(ident, KIND, resolve, lambda e: e.nbytes)
        if built:
            key, table = entry.key, built[0]
        elif entry.table is not None:
            self._count("hits")
            key, table = entry.key, entry.table
        else:
            key, table = self._reload(ident, entry, path, dev, inode, build)
        self.recent.note(ident, key, name, len(table))
        return key, table

    def _reload(self, ident: str, entry: _FileTables, path: str, dev: str, inode: int,
                build: bool) -> tuple[str, UnwindTable]:
        """The table of an entry whose copy is on disk: the one a capture holds, else the disk's."""
        with self._reload_lock:
            table = self._tables.get(entry.key)
            if table is not None:
                self._count("hits")
                return entry.key, table
            table = self._load(entry.key, entry.build_id)
            if table is None:  # the copy on disk went (or is unreadable): build again
                self.files.discard(ident, KIND)
                entry, table = self._resolve(path, dev, inode, build)
                self.files.put(ident, KIND, entry, entry.nbytes)
                return entry.key, table
            self._count("disk_hits")
            self._tables[entry.key] = table
            return entry.key, table

    def known(self, path: str, name: str | None = None) -> tuple[str, int] | None:
        """(table key, link-time base) of a file whose table this cache resolved before, from its per-file
        entry: no table is read (the daemon's arrays may hold the file's rows already: NativeUnwinder.prepare).
        None when there is no entry. OSError (file gone) propagates. name: as get()'s."""
        ident = self.files.identify(path)
        entry = self.files.peek(ident, KIND)
        if entry is None:
            return None
        self.recent.note(ident, entry.key, name, None)
        return entry.key, entry.base

    def load_ahead(self, rec: RecentFile) -> tuple[str, UnwindTable] | None:
        """(key, table) of a recently used file for a prewarm, or None: the file is gone from its path, is no
        regular file, is another file now (its identity is not the record's: replaced, or someone else's), or
        its table is not on disk (nothing is built). The file is opened once and read through that descriptor
        (a rename meanwhile cannot swap it), and the key comes from its bytes now, as any capture's get()
        computes it: the record names the file, it decides nothing that is placed. No use is recorded."""
        try:
            fd = os.open(rec.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a FIFO or a device put there would block or never end
                return None
            if rec.identity.startswith("b:") and rec.identity.split(":")[2] != str(st.st_size):
                return None  # another size: another identity, known without reading the file
            path = f"/proc/self/fd/{fd}"
            if self.files.identify(path) != rec.identity:
                return None
            dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
            return self.get(path, dev, st.st_ino, build=False)
        except (OSError, NotCached):
            return None
        finally:
            os.close(fd)

    def ready(self, path: str, dev: str, inode: int, name: str | None = None) -> tuple[str, UnwindTable] | None:
        """get(), unless the file's table is neither in memory nor on disk and is large (BACKGROUND_MIN_BYTES
        of unwind sections): then None at once, and the caller builds it with get() in the background (its
        frames meanwhile unwind with frame pointers). OSError (file gone) propagates."""
        ident = self.files.identify(path)
        if not self.files.holds(ident, KIND) and self._is_large(path):
            return None
        return self.get(path, dev, inode, name)

    def _is_large(self, path: str) -> bool:
        """Whether its table, not in memory or on disk, is built in the background (or a child process)."""
        try:
            with ElfFile(path) as f:
                size = sum(f.data_size(name) for name in UNWIND_SECTIONS)
                if size < min(self.child_min_bytes, BACKGROUND_MIN_BYTES):
                    return False
                digest = f.digest(UNWIND_SECTIONS)
        except (ElfError, OverCap):
            return False  # refused or no table: known at once
        p = self._disk_path(f"c:{digest}") if digest else None
        return p is None or not p.exists()

    def get_many(self, files: list[tuple[str, str, int]], wait_for_children: bool = True,
                 names: list[str] | None = None) -> list[tuple[str, UnwindTable] | OSError | None]:
        """get() for each (path, dev, inode), up to `workers` builds at a time; an OSError in place of a
        file that could not be read. With wait_for_children False, ready() instead: None for each file that
        needs a build in a child process. names: get()'s, one per file (then the recent uses are saved when
        a file is new to them)."""
        fetch = self.get if wait_for_children else self.ready
        todo = [(*f, n) for f, n in zip(files, names if names is not None else [None] * len(files), strict=True)]

        def one(f: tuple[str, str, int, str | None]) -> tuple[str, UnwindTable] | OSError | None:
            try:
                return fetch(*f)
            except OSError as e:
                return e
        if len(todo) <= 1 or self.workers == 1:
            out = [one(f) for f in todo]
        else:
            with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="unwind-tables") as pool:
                out = list(pool.map(one, todo))
        self.recent.save()
        return out

    def _resolve(self, path: str, dev: str, inode: int, build: bool = True) -> tuple[_FileTables, UnwindTable]:
        key, table = self._table(path, dev, inode, build)
        with self._lock:
            held = self._tables.get(key)  # the same table under another identity (another build id)
            table = held if held is not None else table
            self._tables[key] = table
        p = self._disk_path(key)
        return _FileTables(key, None if p is not None and p.exists() else table, table.build_id, table.base), table

    def _table(self, path: str, dev: str, inode: int, build: bool = True) -> tuple[str, UnwindTable]:
        over: str | None = None
        digest: str | None = None
        try:
            with ElfFile(path) as f:
                build_id = f.build_id()
                unwind_bytes = 0
                try:  # before anything is hashed, copied or inflated
                    for name in UNWIND_SECTIONS:
                        s = f.sections.get(name)
                        size = f.data_size(name)
                        check_size(max(size, s.size if s is not None else 0), f"{path}: section {name}")
                        unwind_bytes += size
                except OverCap as e:
                    over = str(e)
                digest = f.digest(UNWIND_SECTIONS) if over is None else None  # (hashes the raw bytes)
        except ElfError:
            build_id, unwind_bytes = None, 0
        key = f"c:{digest}" if digest else f"i:{dev}:{inode}"
        table = self._tables.get(key)
        if table is not None:
            return key, table
        if over is not None:
            return key, self._refused(path, build_id, over)
        table = self._load(key, build_id)
        if table is not None:
            self._count("disk_hits")
        elif not build:
            raise NotCached(key)
        elif unwind_bytes >= self.child_min_bytes:
            table = self._build_in_child(path, key, build_id)
        elif unwind_bytes >= BACKGROUND_MIN_BYTES:
            with self._large_build_lock:
                table = self._build(path, key, build_id)
        else:
            table = self._build(path, key, build_id)
        return key, table

    def _count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1

    def _build(self, path: str, key: str, build_id: str | None) -> UnwindTable:
        try:
            table = build_table(path)
        except OverCap as e:
            return self._refused(path, build_id, str(e))
        except (ElfError, CfiError, ValueError) as e:
            return self._no_table(path, build_id, str(e))
        self._count("builds")
        self._save(key, table)
        return table

    def _no_table(self, path: str, build_id: str | None, why: str, level: int = logging.INFO) -> UnwindTable:
        """An empty table (the walker uses frame pointers in the file), counted; warned about when the
        builder itself failed rather than the file having no CFI."""
        log.log(level, "no unwind table for %s: %s", path, why)
        self._count("failures")
        return empty_table(X86_64.name, build_id)

    def _refused(self, path: str, build_id: str | None, why: str) -> UnwindTable:
        """A file over a cap: an empty table whose warning goes into the profiles of its targets. Logged
        once per file (the empty table is cached like any other)."""
        log.warning("unwind table refused: %s", why)
        self._count("over_cap")
        # the warning names no path: the table is shared by every process mapping the file, under its names
        return empty_table(X86_64.name, build_id, warning=why.removeprefix(f"{path}: "))

    def _build_in_child(self, path: str, key: str, build_id: str | None) -> UnwindTable:
        """Builds in `python -m deepctx.host.unwind.build_child` into a scratch file (in the disk cache's
        folder when it is usable, so that the result is moved there, not copied), and loads the result."""
        disk = self._disk_path(key)
        with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=self._scratch_parent()) as tmp:
            out = Path(tmp) / "table.npz"
            argv = [sys.executable, "-m", "deepctx.host.unwind.build_child", path, str(out),
                    str(LIMITS.max_decompressed_bytes), str(LIMITS.max_unwind_rows)]
            try:
                child = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                                       stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return self._no_table(path, build_id, f"its build ran past {CHILD_TIMEOUT_S:.0f} s", logging.WARNING)
            except OSError as e:  # no interpreter to start: build here instead
                log.warning("cannot start the unwind table builder (%s): building %s in the daemon", e, path)
                return self._build(path, key, build_id)
            if child.returncode == OVER_CAP:
                return self._refused(path, build_id, child.stderr.strip())
            if child.returncode == NO_TABLE:
                return self._no_table(path, build_id, child.stderr.strip())
            if child.returncode != 0:
                tail = child.stderr.strip().splitlines()[-1:] or [f"status {child.returncode}"]
                return self._no_table(path, build_id, f"the table builder failed: {tail[0]}", logging.WARNING)
            try:
                table = load_table(out, build_id)
            except (OSError, KeyError, ValueError) as e:
                return self._no_table(path, build_id, f"the table builder's output is unreadable: {e}", logging.WARNING)
            if disk is not None:
                try:
                    os.replace(out, disk)
                except OSError:  # another file system, or no cache folder: write it there (or warn)
                    self._save(key, table)
        self._count("builds")
        self._count("child_builds")
        return table

    def _scratch_parent(self) -> str | None:
        """The disk cache's folder when it exists or can be made and is writable, else None (system tmp)."""
        if self.disk_dir is None:
            return None
        try:
            self.disk_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return None
        return str(self.disk_dir) if os.access(self.disk_dir, os.W_OK) else None

    def _disk_path(self, key: str) -> Path | None:
        """Where a table is kept on disk: only tables keyed by content (c:<hash>) are."""
        if self.disk_dir is None or not key.startswith("c:"):
            return None
        return self.disk_dir / f"{key[2:]}.v{DISK_FORMAT}.npz"

    def _load(self, key: str, build_id: str | None) -> UnwindTable | None:
        p = self._disk_path(key)
        if p is None or not p.exists():
            return None
        try:
            table = load_table(p, build_id)
        except (OSError, KeyError, ValueError) as e:
            log.warning("ignoring unreadable cached table %s: %s", p, e)
            return None
        table.stats["from_disk"] = 1.0
        return table

    def _save(self, key: str, table: UnwindTable) -> None:
        p = self._disk_path(key)
        if p is None:
            return
        try:
            save_table(table, p)
        except OSError as e:
            log.warning("cannot cache the unwind table in %s: %s", p, e)

    def __len__(self) -> int:
        """Tables held in memory now (by this cache or by a capture)."""
        return len(self._tables)

    @property
    def memory(self) -> int:
        return sum(t.memory for t in list(self._tables.values()))
