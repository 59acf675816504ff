"""The record of files captures asked symbols of (host/recent_uses.py) and the restarted daemon's build ahead
from it (ProfilerService.prewarm_symbols): the most recently used first within a count, kept on disk as
deepctxd's private file, and a file built ahead only while it is the file the record names."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from deepctx.daemon.symbolize.native import KIND, SymbolCache
from deepctx.host.file_cache import FileCache
from deepctx.host.procfs import read_maps
from deepctx.host.recent_uses import FILE_NAME, RecentUse, RecentUses, choose, keepable, opened


def use(name: str, used: float, kind: str = "symbols") -> RecentUse:
    return RecentUse(kind, f"b:{name}:1", f"{name}.so", f"/lib/{name}.so", used)


def libc() -> Path:
    return Path(next(m.path for m in read_maps(os.getpid()) if os.path.basename(m.path).startswith("libc.so")))


def test_the_most_recently_used_of_the_kinds_asked_come_first_within_the_count() -> None:
    recs = [use("a", 1), use("b", 3), use("c", 2), use("d", 4), use("p", 5, kind="python"), use("t", 6, "torch_ops")]
    got = choose(recs, limit=3, kinds=("symbols", "python"))
    assert [r.path for r in got] == ["/lib/p.so", "/lib/d.so", "/lib/b.so"]
    assert choose(recs, limit=0, kinds=("symbols",)) == []


def test_only_files_found_by_content_at_a_real_path_are_kept() -> None:
    assert keepable("symbols", "b:id:1", "/usr/lib/x.so")
    assert keepable("python", "h:hash:u1000", "/home/u/python3.12")
    assert not keepable("symbols", "f:1:2:3:4:5", "/x.so")  # one inode's version
    assert not keepable("symbols", "b:id:1", "/x.so (deleted)")
    assert not keepable("symbols", "b:id:1", "/proc/12/map_files/1-2")
    assert not keepable("symbols", "b:id:1", "[vdso]")


def test_uses_are_kept_in_use_order_bounded_and_read_back_by_the_next_daemon(tmp_path: Path) -> None:
    r = RecentUses(tmp_path, max_records=3)
    r.note("symbols", "b:a:1", "/lib/a.so", now=1)
    r.note("python", "b:p:1", "/usr/bin/python3.11", now=2)
    r.note("symbols", "b:b:1", "/lib/b.so", now=3)
    r.note("symbols", "b:a:1", "/lib/a.so", now=4)  # used again: last
    r.note("symbols", "b:n:1", None, now=5)  # no path: not a use
    assert r.save()
    assert not r.save()  # nothing new
    assert oct(os.stat(tmp_path / FILE_NAME).st_mode & 0o777) == "0o600"
    again = RecentUses(tmp_path, max_records=3).records()
    assert [(x.kind, x.name, x.used) for x in again] == [("python", "python3.11", 2), ("symbols", "b.so", 3),
                                                          ("symbols", "a.so", 4)]
    r.note("symbols", "b:c:1", "/lib/c.so", now=6)  # a fourth: the least recently used goes
    assert [x.name for x in r.records()] == ["b.so", "a.so", "c.so"]


def test_an_unreadable_or_foreign_record_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text('{"not": "a list"}')
    os.chmod(tmp_path / FILE_NAME, 0o600)
    assert RecentUses(tmp_path).records() == []
    (tmp_path / FILE_NAME).write_text('[{"kind": "symbols", "identity": "b:x:1", "name": "other.so", '
                                      '"path": "/lib/x.so", "used": 1}]')  # a name that is not its path's
    assert RecentUses(tmp_path).records() == []


def test_a_recorded_file_is_built_ahead_only_while_it_is_the_recorded_file(tmp_path: Path) -> None:
    lib = tmp_path / "libc-copy.so.6"
    shutil.copy2(libc(), lib)
    files = FileCache()
    ident = files.identify(str(lib))
    rec = RecentUse(KIND, ident, lib.name, str(lib), 1.0)
    cache = SymbolCache(files=files)
    with opened(rec, files.identify) as p:
        assert p is not None and cache.build_ahead(p, rec.identity)
    assert cache.loads == 1 and files.holds(ident, KIND)
    with opened(rec, files.identify) as p:
        assert p is not None and not cache.build_ahead(p, rec.identity)  # held: nothing read again
    assert cache.loads == 1
    # another file at the path now (another identity), a FIFO, nothing: not taken
    lib.unlink()
    lib.write_bytes(b"\x7fELF not the same")
    with opened(rec, files.identify) as p:
        assert p is None
    lib.unlink()
    os.mkfifo(lib)
    with opened(rec, files.identify) as p:
        assert p is None
    lib.unlink()
    with opened(rec, files.identify) as p:
        assert p is None


def test_a_captures_symbol_lookup_records_the_file_at_its_mapped_path(tmp_path: Path) -> None:
    files = FileCache()
    files.uses = RecentUses(tmp_path)
    pid = os.getpid()
    m = next(x for x in read_maps(pid) if x.file_backed and os.path.basename(x.path).startswith("libc.so"))
    assert SymbolCache(files=files).get(pid, m) is not None
    (r,) = files.uses.records()
    assert (r.kind, r.path, r.identity) == (KIND, m.path, files.identify(m.path))
    assert (tmp_path / FILE_NAME).exists()  # a new file: written at once
