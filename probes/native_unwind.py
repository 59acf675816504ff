"""Loader of the native unwinder: builds unwind tables for a target's executable files, writes them
and the pid's mappings into the maps of native_unwind.bpf.h, and reads captured stacks back.

The BPF side is a helper (native_stack_capture), not a program: the CPU sampler and the GPU API probes
call it, so this family attaches no events of its own. Its source must be pasted into the composed
program (bcc rewrites map calls only in the main file, not in #included ones), and the composed
program is compiled with -I PROBES_DIR so that native_unwind.h resolves.
"""

from __future__ import annotations

import ctypes as ct
import itertools
import logging
import mmap
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deepctx.host import procfs
from deepctx.host.elf.reader import ElfError, ElfFile
from deepctx.host.unwind.arch import Info
from deepctx.host.unwind.cache import TableCache
from deepctx.host.unwind.recent import RecentFile
from deepctx.host.unwind.space import NO_ROWS, TableSpace, Upload
from deepctx.host.unwind.table import UnwindTable
from deepctx.probes.family import PROBES_DIR, FamilyDefaults, Target, read_source
from deepctx.probes.maps import entry_count
from deepctx.probes.program_share import share_of
from deepctx.probes.unwind_maps import SharedUnwindMaps, current_maps, daemon_maps

log = logging.getLogger(__name__)

# native_tables_gen's values: each written once in the daemon's life, so that no memoized walk (struct native_memo)
# from tables since changed meets its generation again, a program's maps zeroed by the pool's reset included
_generations = itertools.count(1)
_generation_lock = threading.Lock()


def mmap_min_addr() -> int:
    """The lowest address a user mapping may start at (vm.mmap_min_addr): the walker takes a frame pointer below
    it for none without reading there. 0 (every address read) where it cannot be read."""
    try:
        with open("/proc/sys/vm/mmap_min_addr") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def bump_tables_generation(bpf: Any) -> None:
    """After a change to what a walk reads besides the stack (native_procs, the rows, pages and rules), or to
    native_stacks, which memoized walks name: a value never written before goes to native_tables_gen. After
    the change, not before: a walk that read the new value reads the changed tables, and a memo of a walk that
    began before it has the old value."""
    with _generation_lock:
        bpf[b"native_tables_gen"][ct.c_int(0)] = ct.c_uint64(next(_generations))

HEADER = PROBES_DIR / "native_unwind.h"

# Mirrors of native_unwind.h (tests/unit/unwind/test_unwind_layout.py compiles the header to check them).
NATIVE_F_TRUNCATED = 1 << 0
NATIVE_F_NO_TABLE = 1 << 1
NATIVE_F_READ_ERROR = 1 << 2
NATIVE_F_UNSUPPORTED = 1 << 3
NATIVE_F_NO_PROC = 1 << 4
NATIVE_F_COMPLETE = 1 << 5
NATIVE_F_BAD_FRAME = 1 << 6
NATIVE_F_KERNEL_REGS = 1 << 7
FLAG_NAMES = {
    NATIVE_F_TRUNCATED: "truncated",
    NATIVE_F_NO_TABLE: "no_table",
    NATIVE_F_READ_ERROR: "read_error",
    NATIVE_F_UNSUPPORTED: "unsupported",
    NATIVE_F_NO_PROC: "no_proc",
    NATIVE_F_COMPLETE: "complete",
    NATIVE_F_BAD_FRAME: "bad_frame",
    NATIVE_F_KERNEL_REGS: "kernel_regs",
}
# NATIVE_STAT_* in index order
STAT_NAMES = (
    "calls",
    "stored",
    "frames",
    "complete",
    "truncated",
    "no_proc",
    "fp_frames",
    "read_error",
    "unsupported",
    "bad_frame",
    "store_failed",
    "memo_hits",
    "memo_misses",
)


def flag_names(flags: int) -> list[str]:
    return [name for bit, name in FLAG_NAMES.items() if flags & bit]


class NativeUnwindRow(ct.Structure):
    _fields_ = [("pc", ct.c_uint32), ("info", ct.c_uint32)]


class NativeUnwindInfo(ct.Structure):
    _fields_ = [
        ("cfa_rule", ct.c_uint8),
        ("fp_rule", ct.c_uint8),
        ("ra_rule", ct.c_uint8),
        ("cfa_param", ct.c_uint8),
        ("cfa_off", ct.c_int32),
        ("fp_off", ct.c_int16),
        ("ra_off", ct.c_int16),
    ]

    @classmethod
    def of(cls, rule: Info) -> NativeUnwindInfo:
        cfa_rule, cfa_param, cfa_off, fp_rule, fp_off, ra_rule, ra_off = rule
        return cls(cfa_rule, fp_rule, ra_rule, cfa_param, cfa_off, fp_off, ra_off)


class NativeMapping(ct.Structure):
    _fields_ = [
        ("start", ct.c_uint64),
        ("end", ct.c_uint64),
        ("bias", ct.c_uint64),
        ("pages_start", ct.c_uint32),
        ("pages_len", ct.c_uint32),
    ]


class NativeRegs(ct.Structure):
    _fields_ = [("ip", ct.c_uint64), ("sp", ct.c_uint64), ("bp", ct.c_uint64), ("from_return", ct.c_uint64)]


class NativeUnwindCounters(ct.Structure):
    _fields_ = [("v", ct.c_uint64 * len(STAT_NAMES))]


def native_proc_type(max_mappings: int) -> type[ct.Structure]:
    """struct native_proc for a given NATIVE_MAX_MAPPINGS."""
    return type(
        f"NativeProc{max_mappings}",
        (ct.Structure,),
        {
            "_fields_": [
                ("len", ct.c_uint32),
                ("generation", ct.c_uint32),
                ("maps", NativeMapping * max_mappings),
            ]
        },
    )


def native_stack_type(max_depth: int) -> type[ct.Structure]:
    """struct native_stack for a given NATIVE_MAX_DEPTH."""
    return type(
        f"NativeStack{max_depth}",
        (ct.Structure,),
        {"_fields_": [("len", ct.c_uint32), ("flags", ct.c_uint32), ("ips", ct.c_uint64 * max_depth)]},
    )


@dataclass
class UnwindConfig:
    max_depth: int = 127
    max_mappings: int = 1024  # per process; a power of two
    max_procs: int = 64
    max_stacks: int = 16384
    max_rules: int = 8192
    rows_headroom: int = 1 << 20  # rows for libraries loaded after the maps were sized (8 bytes each)
    pages_headroom: int = 1 << 16  # page index entries for them (4 bytes each, 8 in the map)
    # the smallest maps a program gets: a PyTorch process with CUDA needs 8.7 to 9.4 M rows (H200 host), so
    # with these the program compiled ahead at the daemon's start serves it; a smaller class made its first
    # capture compile a program of its own (5 to 6 s there). 128 MiB of rows and 16 MiB of page index (4-byte
    # entries at an 8-byte stride), kernel memory held once per daemon: its programs of this class share them
    # (probes/unwind_maps.py); Status shows it as bpf_map_bytes.
    min_rows: int = 1 << 24
    min_pages: int = 1 << 21
    page_shift: int = 9  # page index granule (2^9 bytes of code: an index of 0.8% of the code size)
    cache_dir: str | None = None  # keep tables on disk by build id


@dataclass(frozen=True)
class _PlacedTable:
    """What is left of a table once its rows are in the walker's maps: the cache can then let the arrays
    go (a copy is on disk), and the mapping entries need only the row count and the link-time base."""

    rows: int
    base: int
    page_count: int

    def __len__(self) -> int:
        return self.rows

    def pages(self, page_shift: int) -> int:
        return self.page_count


@dataclass
class _ProcState:
    """What the unwinder knows about one target."""

    tables: dict[tuple[str, int], tuple[str, UnwindTable | _PlacedTable]] = field(default_factory=dict)  # (dev, inode) ->
    pending: dict[tuple[str, int], Future[tuple[str, UnwindTable]]] = field(default_factory=dict)
    biases: dict[tuple[int, int, int], int | None] = field(default_factory=dict)  # (start, offset, inode) ->
    written: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    generation: int = 0
    mappings_dropped: int = 0
    files_failed: int = 0
    warned: set[str] = field(default_factory=set)
    # files whose rows the daemon's arrays held at prepare: (dev, inode) -> the path to read the table from, should
    # the space the attach takes not hold them (a _PlacedTable stands in for the table meanwhile)
    stubs: dict[tuple[str, int], str] = field(default_factory=dict)

    def warn(self, target: Target, key: str, text: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            target.warnings.append(text)


def _warn_refused(state: _ProcState, target: Target, path: str, key: str, table: UnwindTable) -> None:
    """A file over a cap (host/file_limits.py) is unwound with frame pointers; the profile says why."""
    if table.warning:
        state.warn(target, f"refused:{key}", f"native stacks: {path}: {table.warning}")


def size_class(n: int) -> int:
    """The map size for n entries: the next power of two."""
    return 1 << max(0, n - 1).bit_length()


class NativeUnwinder(FamilyDefaults):
    """Probe family "native_unwind" (see probes/family.py)."""

    name = "native_unwind"

    def __init__(self, config: UnwindConfig | None = None, cache: TableCache | None = None,
                 shared: bool = False) -> None:
        """shared: the program uses the daemon's arrays (probes/unwind_maps.py) when its size class is theirs."""
        self.config = config or UnwindConfig()
        self.shared = shared
        self._maps: SharedUnwindMaps | None = None  # the daemon's arrays, where this program uses them
        self._attached = False  # counted among their users
        if self.config.max_mappings & (self.config.max_mappings - 1):
            raise ValueError("max_mappings must be a power of two")
        # not `or`: an empty cache is falsy (len 0), and the daemon's shared one starts empty
        self.cache = cache if cache is not None else TableCache(self.config.cache_dir)
        self._files: dict[str, UnwindTable | _PlacedTable] = {}  # file key -> table, over all prepared targets
        self._frozen: dict[str, int | str] | None = None
        self._space: TableSpace | None = None
        self._builder: ThreadPoolExecutor | None = None
        self._proc_t = native_proc_type(self.config.max_mappings)
        self._stack_t = native_stack_type(self.config.max_depth)

    # --- lifecycle -------------------------------------------------------------------------------

    def source(self) -> str:
        return read_source("native_unwind.bpf.h")

    def defines(self) -> dict[str, int | str]:
        """Map sizes for the files prepared so far; fixed from the first call on (the program is compiled
        with them)."""
        if self._frozen is None:
            c = self.config
            # rounded up to a power of two: the program's text must not change with every target's files, or
            # no capture could use a program loaded for another (probes/programs.py); same-program
            # processes need the same rows and get the same size
            # (at least min_rows and twice the headroom: a program loaded before any target, at the daemon's
            # start, fits the processes whose files need less than that). Tables still being built (prepare)
            # do not count: only an upper bound of their rows is known (1.1 to 2x), and a first capture of
            # PyTorch with an empty disk cache sized by it compiled a program of the next class (H200: 9 s,
            # and 256 MiB more of kernel memory) for tables that fit the smaller one. One that does not fit when
            # it arrives unwinds by frame pointers, with a warning; the next capture knows its size.
            rows = max(size_class(sum(len(t) for t in self._files.values()) + c.rows_headroom),
                       2 * c.rows_headroom, c.min_rows)
            pages = max(size_class(sum(t.pages(c.page_shift) for t in self._files.values()) + c.pages_headroom),
                        2 * c.pages_headroom, c.min_pages)
            self._frozen = {
                "DEEPCTX_NATIVE_UNWIND": 1,  # tells families compiled after this one that the walker is there
                "NATIVE_MAX_DEPTH": c.max_depth,
                "NATIVE_MAX_MAPPINGS": c.max_mappings,
                "NATIVE_MAP_SEARCH_STEPS": max(1, c.max_mappings.bit_length()),
                "NATIVE_MAX_PROCS": c.max_procs,
                "NATIVE_MAX_STACKS": c.max_stacks,
                "NATIVE_MAX_INFOS": c.max_rules,
                "NATIVE_MAX_ROWS": rows,
                "NATIVE_MAX_PAGES": pages,
                "NATIVE_PAGE_SHIFT": c.page_shift,
                "NATIVE_MIN_ADDR": mmap_min_addr(),
            }
            self._space = TableSpace(rows, pages, c.max_rules, c.page_shift)
            if self.shared:
                self._maps = daemon_maps(rows, pages, c.max_rules, c.page_shift)
                if self._maps is not None:
                    self._frozen["NATIVE_SHARED_TABLES"] = 1
        return dict(self._frozen)

    def before_compile(self) -> None:
        """The daemon's arrays exist before a program that declares them extern is compiled."""
        self.defines()
        if self._maps is not None:
            self._maps.export()

    def prepare(self, target: Target) -> None:
        state = target.state.setdefault(self.name, _ProcState())
        todo: dict[tuple[str, int], tuple[procfs.Mapping, str]] = {}
        for m in _code_mappings(target.space):
            if m.file_key in state.tables or m.file_key in todo:
                continue
            try:
                todo[m.file_key] = (m, procfs.open_mapped_file(target.pid, m))
            except OSError as e:
                state.files_failed += 1
                log.info("pid %d: cannot read %s: %s", target.pid, m.path, e)
        for fk in self._placed_already(todo, state):
            del todo[fk]
        files = [(path, *fk) for fk, (_, path) in todo.items()]
        # several at once; a large file not built yet is built in the background (poll picks it up), so
        # the first samples do not wait for it: its frames unwind with frame pointers until then
        got_many = self.cache.get_many(files, wait_for_children=False, names=[m.path for m, _ in todo.values()])
        for (fk, (m, path)), got in zip(todo.items(), got_many, strict=True):
            if got is None:
                state.pending[fk] = self._background().submit(self.cache.get, path, *fk, m.path)
                continue
            if isinstance(got, OSError):
                state.files_failed += 1
                log.info("pid %d: cannot read %s: %s", target.pid, m.path, got)
                continue
            state.tables[fk] = got
            self._files.setdefault(got[0], got[1])
            _warn_refused(state, target, m.path, *got)

    def _placed_already(self, todo: dict[tuple[str, int], tuple[procfs.Mapping, str]], state: _ProcState
                        ) -> list[tuple[str, int]]:
        """The files whose rows the daemon's arrays hold already (another process of the same files was
        captured): a stand-in with their row and page counts and base, no table read (a later PyTorch process
        read its 90 files' tables from disk again: about a tenth of a CPU-second in continuous mode). Returns
        their keys in todo."""
        maps = current_maps() if self.shared else None
        if maps is None:
            return []
        done = []
        for fk, (m, path) in todo.items():
            found = self._stub_for(path, maps, name=m.path)
            if found is not None:
                state.tables[fk] = found
                state.stubs[fk] = path
                done.append(fk)
        return done

    def _stub_for(self, path: str, maps: SharedUnwindMaps | None, space: TableSpace | None = None,
                  name: str | None = None) -> tuple[str, _PlacedTable] | None:
        """(key, stand-in) for the file at path if this cache resolved its table before and the space (maps'
        own, unless given) holds its rows; None otherwise. The daemon's arrays are looked at under their lock.
        name: where the target maps it (a recent use, TableCache.known)."""
        try:
            known = self.cache.known(path, name)
        except OSError:
            return None
        if known is None:
            return None
        key, base = known
        with maps.lock if maps is not None else nullcontext():
            where = space if space is not None else maps.space if maps is not None else None
            placed = where.placement(key) if where is not None else None
        if placed is None or not placed.rows_len:
            return None
        stub = _PlacedTable(placed.rows_len, base, placed.pages_len - 1)
        self._files.setdefault(key, stub)
        return key, stub

    def place_ahead(self, files: Iterable[RecentFile], stop: Callable[[], bool] = lambda: False) -> dict[str, int]:
        """A restarted daemon's prewarm (ProfilerService.prewarm_unwind_placements): the tables of recently used
        files, read from the disk cache (TableCache.load_ahead: the file's identity checked, its key computed
        from its bytes, nothing built), get their rows placed in the daemon's arrays, so that a process of those
        files found later takes stand-ins (prepare: _placed_already) and reads no table.

        Each file is placed and written under the arrays' lock, as an attach places its files: a capture that
        attaches meanwhile finds the file placed and uses its rows, or places it itself and this passes it
        over; never both. The per-file cache's build lock keeps one disk read of a file between this and a
        capture's prepare. No generation is bumped: rows written past every placement are read by no walk until
        an attach or poll names them in a mapping, and that bumps it. Files that would eat into the room kept
        for a capture's new files (rows_headroom, pages_headroom) are passed over. Returns counts: files
        placed, rows written, files found placed already, files passed over (gone, replaced, not on disk, no
        room)."""
        out = {"files": 0, "rows": 0, "placed_already": 0, "passed": 0}
        if not self.shared:
            return out
        self.defines()
        maps = self._maps
        if maps is None:
            return out
        maps.export()
        shift = self.config.page_shift
        for rec in files:
            if stop():
                break
            with maps.lock:  # no table read for a file that cannot fit
                fits = maps.space.placement(rec.key) is not None or self._room(maps.space, rec.rows, 0)
            got = self.cache.load_ahead(rec) if fits else None
            if got is None:
                out["passed"] += 1
                continue
            key, table = got
            with maps.lock:
                space = maps.space  # the one in use now: a capture may have restarted it meanwhile
                if space.placement(key) is not None:
                    out["placed_already"] += 1
                    continue
                if not len(table) or not self._room(space, len(table), table.pages(shift)):
                    out["passed"] += 1
                    continue
                if maps.fresh:
                    self._write_rules(None, space.initial_rules())
                    maps.fresh = False
                upload = space.place(key, table)
                if upload is not None:
                    self._write_rows(None, upload)
                    out["files"] += 1
                    out["rows"] += len(table)
            del got, table  # one table held at a time
        return out

    def _room(self, space: TableSpace, rows: int, pages: int) -> bool:
        """Whether rows and pages fit in space with the headroom for a capture's new files left over."""
        c = self.config
        return (space.rows_used + rows <= space.max_rows - c.rows_headroom
                and space.pages_used + pages <= space.max_pages - c.pages_headroom)

    def _unstub(self, state: _ProcState, space: TableSpace) -> None:
        """Reads the tables of the stand-ins whose rows the space the attach took does not hold (it restarted, or
        the program has arrays of its own): their rows are written as any new file's."""
        for fk, path in list(state.stubs.items()):
            key, _ = state.tables[fk]
            if space.placement(key) is not None:
                continue
            del state.stubs[fk]
            try:
                state.tables[fk] = self.cache.get(path, *fk)
            except OSError:  # gone meanwhile: its frames unwind with frame pointers
                del state.tables[fk]

    def attach(self, bpf: Any, target: Target) -> None:
        self.defines()
        state: _ProcState = target.state.setdefault(self.name, _ProcState())
        maps = self._maps
        if maps is None:
            self._space = self._kept_space(bpf, target)
            self._unstub(state, self._space)
            self._sync(bpf, target)
            bump_tables_generation(bpf)  # the rules may have been written again (_kept_space)
            return
        with maps.lock:  # the daemon's arrays: placed once for every program, restarted by no one in use
            maps.users += 1
            self._attached = True
            space = maps.space
            if not self._fits(space, target) and maps.users == 1:
                space = maps.restart()
            if maps.fresh:
                self._write_rules(bpf, space.initial_rules())
                maps.fresh = False
            self._space = space
            self._unstub(state, space)
            self._sync(bpf, target)
            bump_tables_generation(bpf)  # the arrays may have been restarted, the rules written again

    def _fits(self, space: TableSpace, target: Target) -> bool:
        """Whether the target's files not placed in space yet fit in what is left of it."""
        state: _ProcState = target.state.setdefault(self.name, _ProcState())
        new = {key: table for key, table in state.tables.values() if key and space.placement(key) is None}
        rows = sum(len(t) for t in new.values())
        pages = sum(t.pages(self.config.page_shift) for t in new.values())
        return space.rows_used + rows <= space.max_rows and space.pages_used + pages <= space.max_pages

    def _kept_space(self, bpf: Any, target: Target) -> TableSpace:
        """Where the loaded program's maps have room: its rows stay from one capture to the next (the pool's
        reset leaves the large arrays as they are), so the space that placed them goes with the program, and a
        file an earlier capture of it placed is not written again (on the H200 host, writing a PyTorch
        process's 9 M rows took 0.9 to 2.3 s of every attach). A program without one, or whose space has no
        room left for this target's files not placed yet (files no capture maps any more hold it), starts
        from this capture's empty one."""
        space = self._space
        assert space is not None, "defines() fixes the map sizes before attach"
        kept: TableSpace | None = getattr(bpf, "deepctx_unwind_space", None)  # kept on the program, as ring sinks are
        if kept is not None and (kept.max_rows, kept.max_pages, kept.max_rules) == (space.max_rows, space.max_pages,
                                                                                     space.max_rules):
            if self._fits(kept, target) or len(share_of(bpf).users) > 1:
                return kept  # another capture on the program unwinds with it: files that do not fit use frame pointers
        self._write_rules(bpf, space.initial_rules())
        bpf.deepctx_unwind_space = space
        return space

    def poll(self, bpf: Any, target: Target) -> None:
        """Picks up libraries mapped since attach (dlopen); their tables are built off the caller's thread."""
        state: _ProcState = target.state.setdefault(self.name, _ProcState())
        for m in _code_mappings(target.space):
            if m.file_key in state.tables or m.file_key in state.pending:
                continue
            try:
                path = procfs.open_mapped_file(target.pid, m)
            except OSError:
                state.files_failed += 1
                state.tables[m.file_key] = ("", _NO_TABLE)
                continue
            if self._space is not None:  # a library another process loaded: its rows are there, no table read
                found = self._stub_for(path, self._maps, self._space, m.path)
                if found is not None:
                    state.tables[m.file_key] = found
                    continue
            state.pending[m.file_key] = self._background().submit(self.cache.get, path, *m.file_key, m.path)
        names = {m.file_key: m.path for m in _code_mappings(target.space)}
        for fk, fut in list(state.pending.items()):
            if fut.done():
                del state.pending[fk]
                try:
                    state.tables[fk] = fut.result()
                    _warn_refused(state, target, names.get(fk, "?"), *state.tables[fk])
                except OSError:
                    state.files_failed += 1
                    state.tables[fk] = ("", _NO_TABLE)
        if self._maps is not None:
            with self._maps.lock:
                self._sync(bpf, target)
        else:
            self._sync(bpf, target)
        self.cache.recent.save()  # the last uses, at most once a minute (a new file's at once)

    def _background(self) -> ThreadPoolExecutor:
        if self._builder is None:
            self._builder = ThreadPoolExecutor(max_workers=self.cache.workers, thread_name_prefix="unwind-tables")
        return self._builder

    def detach(self, bpf: Any, target: Target) -> None:
        try:
            del bpf[b"native_procs"][ct.c_uint32(target.pid)]
        except KeyError:
            pass
        bump_tables_generation(bpf)
        if self._maps is not None and self._attached:
            with self._maps.lock:
                self._maps.users -= 1
                self._attached = False

    def close(self) -> None:
        if self._builder is not None:
            self._builder.shutdown(wait=False, cancel_futures=True)
            self._builder = None

    # --- reading back ----------------------------------------------------------------------------

    def stack(self, bpf: Any, stack_id: int) -> tuple[list[int], int]:
        """IPs (leaf first) and NATIVE_F_* flags of a captured stack; ([], 0) for an unknown id."""
        try:
            leaf = bpf[b"native_stacks"][ct.c_uint64(stack_id)]
        except KeyError:
            return [], 0
        return self._decode(leaf)

    def stacks(self, bpf: Any) -> dict[int, tuple[list[int], int]]:
        """Every stored stack, by id."""
        return {int(k.value): self._decode(v) for k, v in bpf[b"native_stacks"].items()}

    def _decode(self, leaf: Any) -> tuple[list[int], int]:
        st = self._stack_t.from_buffer_copy(bytes(leaf))
        n = min(int(st.len), self.config.max_depth)
        return list(st.ips[:n]), int(st.flags)

    def clear_window(self, bpf: Any, target: Target, stacks_free: bool) -> None:
        """Continuous mode, after a window was built: the stack map is cleared once it is half full (what
        was captured while the window was built belongs to the next one and still names its stacks), and
        no capture on the program has counts left to build (stacks_free)."""
        stacks = bpf[b"native_stacks"]
        if stacks_free and entry_count(stacks) > self.config.max_stacks // 2:
            stacks.clear()
            bump_tables_generation(bpf)  # memoized walks name stacks no longer there

    def stats(self, bpf: Any) -> dict[str, int]:
        out = dict.fromkeys(STAT_NAMES, 0)
        for cpu in bpf[b"native_unwind_stats"][ct.c_int(0)]:
            counters = NativeUnwindCounters.from_buffer_copy(bytes(cpu))
            for i, name in enumerate(STAT_NAMES):
                out[name] += int(counters.v[i])
        if self._space is not None:
            for k, v in self._space.counters.items():
                out[f"table_{k}"] = v
            out["table_rules"] = self._space.rules_used
        return out

    # --- writing the maps ------------------------------------------------------------------------

    def _sync(self, bpf: Any, target: Target) -> None:
        """Writes tables not in the maps yet and, if it changed, the pid's mapping array."""
        state: _ProcState = target.state.setdefault(self.name, _ProcState())
        space = self._space
        assert space is not None, "defines() fixes the map sizes before attach"
        entries: list[tuple[int, int, int, int, int]] = []
        uploaded = False
        for m in _code_mappings(target.space):
            key, table = state.tables.get(m.file_key, ("", _NO_TABLE))
            placement = NO_ROWS
            if key and len(table):
                upload = space.place(key, table)
                if upload is not None:
                    self._write_rows(bpf, upload)
                    uploaded = True
                placement = space.placement(key) or NO_ROWS
                if isinstance(table, UnwindTable):  # placed (or refused for room): the arrays can go
                    table = _PlacedTable(len(table), table.base, table.pages(self.config.page_shift))
                    state.tables[m.file_key] = (key, table)
                    if key in self._files:
                        self._files[key] = table
                if placement.pages_len == 0:
                    state.warn(
                        target,
                        key,
                        f"native stacks: no room for the unwind table of {m.path} ({len(table)} rows)",
                    )
            bias = self._bias(state, target.pid, m)
            if bias is None:
                placement = NO_ROWS
                bias = 0
            entries.append(
                (
                    m.start,
                    m.end,
                    (bias + table.base) & 0xFFFFFFFFFFFFFFFF,
                    placement.pages_start,
                    placement.pages_len,
                )
            )
        cap = self.config.max_mappings
        state.mappings_dropped = max(0, len(entries) - cap)
        if state.mappings_dropped:
            state.warn(
                target, "mappings", f"native stacks: {len(entries)} code mappings, only {cap} are unwound"
            )
        entries = entries[:cap]
        if entries == state.written:
            if uploaded:
                bump_tables_generation(bpf)
            return
        proc = self._proc_t()
        proc.len = len(entries)
        state.generation += 1
        proc.generation = state.generation
        for i, e in enumerate(entries):
            proc.maps[i] = NativeMapping(*e)
        tbl = bpf[b"native_procs"]
        leaf = tbl.Leaf()
        if ct.sizeof(leaf) != ct.sizeof(proc):
            raise RuntimeError(
                f"struct native_proc is {ct.sizeof(leaf)} bytes in BPF, {ct.sizeof(proc)} here"
            )
        ct.memmove(ct.addressof(leaf), ct.addressof(proc), ct.sizeof(proc))
        tbl[tbl.Key(target.pid)] = leaf
        state.written = entries
        bump_tables_generation(bpf)

    def _bias(self, state: _ProcState, pid: int, m: procfs.Mapping) -> int | None:
        k = (m.start, m.offset, m.inode)
        if k not in state.biases:
            try:
                with ElfFile(procfs.open_mapped_file(pid, m)) as f:
                    state.biases[k] = f.load_bias(m.start, m.offset)
            except (OSError, ElfError):
                state.biases[k] = None
        return state.biases[k]

    def _table(self, bpf: Any, name: bytes) -> Any:
        """One of the three arrays: the daemon's, or the program's own."""
        return self._maps.table(name) if self._maps is not None else bpf[name]

    def _write_rows(self, bpf: Any, upload: Upload) -> None:
        _write_array(self._table(bpf, b"native_rows"), upload.rows_start, np.ascontiguousarray(upload.rows, np.uint64))
        _write_array(self._table(bpf, b"native_pages"), upload.pages_start,
                     np.ascontiguousarray(upload.pages, np.uint32))
        self._write_rules(bpf, upload.rules)

    def _write_rules(self, bpf: Any, rules: list[tuple[int, Info]]) -> None:
        tbl = self._table(bpf, b"native_infos")
        for idx, rule in rules:
            leaf = tbl.Leaf()
            ct.memmove(
                ct.addressof(leaf), ct.addressof(NativeUnwindInfo.of(rule)), ct.sizeof(NativeUnwindInfo)
            )
            tbl[ct.c_uint32(idx)] = leaf


def _write_array(tbl: Any, start: int, values: np.ndarray) -> None:
    """Writes values to an array map from index start: through a mapping of the map's memory where it is
    BPF_F_MMAPABLE (a memory copy: 9.4 M rows took 0.3 s, against 2.8 s in a batch update, whose kernel side
    copies element by element), else in one batch syscall, else one syscall per entry."""
    if _write_mapped(tbl, start, values):
        return
    n = len(values)
    keys = np.arange(start, start + n, dtype=np.uint32)
    vtype = ct.c_uint64 if values.dtype == np.uint64 else ct.c_uint32
    try:
        tbl.items_update_batch((ct.c_uint32 * n).from_buffer(keys), (vtype * n).from_buffer(values))
    except Exception:  # bcc raises a bare Exception; kernels without batch ops: one syscall per entry
        for k, v in zip(keys.tolist(), values.tolist(), strict=True):
            leaf = tbl.Leaf()
            ct.memmove(ct.addressof(leaf), ct.addressof(vtype(v)), ct.sizeof(vtype))
            tbl[ct.c_uint32(k)] = leaf


def _write_mapped(tbl: Any, start: int, values: np.ndarray) -> bool:
    """values into a BPF_F_MMAPABLE array map's memory (each element at a stride of its size rounded up to 8
    bytes, as the kernel lays arrays out); False where the map cannot be mapped (no such flag, a kernel
    before 5.5, not a kernel map). Only the pages written are mapped: the kernel maps a BPF array's pages
    all at once (remap_vmalloc_range), so mapping the whole 128 MiB of rows counted it all in the daemon's
    resident memory, and a capture's peak RSS rose by up to 2 GB."""
    fd, entries = getattr(tbl, "map_fd", None), getattr(tbl, "max_entries", None)
    if not isinstance(fd, int) or not isinstance(entries, int) or start + len(values) > entries or not len(values):
        return False
    size = values.dtype.itemsize
    stride = (ct.sizeof(tbl.Leaf) + 7) & ~7
    if size != ct.sizeof(tbl.Leaf):
        return False
    first, end = start * stride, (start + len(values)) * stride  # bytes of the map's memory written
    offset = first - first % mmap.PAGESIZE
    length = -(-end // mmap.PAGESIZE) * mmap.PAGESIZE - offset
    try:
        mm = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
    except OSError:
        return False
    try:
        window = np.frombuffer(mm, np.uint8)[first - offset:end - offset].reshape(len(values), stride)
        window[:, :size] = np.ascontiguousarray(values).view(np.uint8).reshape(-1, size)
        del window  # the view holds the mapping's buffer: released before the close
    finally:
        mm.close()
    return True


_NO_TABLE = UnwindTable("x86_64", 0, np.zeros(0, np.uint32), np.zeros(0, np.uint32), [])


def _code_mappings(space: procfs.AddressSpace) -> list[procfs.Mapping]:
    """Executable file mappings, sorted by start (as the BPF binary search needs)."""
    return [m for m in space.mappings if m.executable and m.file_backed]
