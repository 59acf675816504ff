"""The recently used files' record (host/unwind/recent.py) and the restarted daemon's reading ahead from it
(TableCache.load_ahead): the most recently used first within a count and the arrays' rows, the last use kept
on disk as deepctxd's private file, and a file read ahead only while it is the file the record names."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from deepctx.host.unwind.cache import TableCache
from deepctx.host.unwind.recent import FILE_NAME, RecentFile, RecentFiles, choose, keepable


def rec(name: str, used: float, rows: int = 10, key: str | None = None) -> RecentFile:
    return RecentFile(f"b:{name}:1", key or f"c:{name}", f"/lib/{name}.so", rows, used)


def test_the_most_recently_used_come_first_within_the_count() -> None:
    got = choose([rec("a", 1), rec("b", 3), rec("c", 2), rec("d", 4)], limit=3, max_rows=1000)
    assert [r.path for r in got] == ["/lib/d.so", "/lib/b.so", "/lib/c.so"]
    assert choose([rec("a", 1)], limit=0, max_rows=1000) == []


def test_a_file_over_the_rows_left_is_passed_over_for_smaller_ones() -> None:
    got = choose([rec("big", 3, rows=900), rec("mid", 2, rows=200), rec("small", 1, rows=50)], limit=10,
                 max_rows=1000)
    assert [r.path for r in got] == ["/lib/big.so", "/lib/small.so"]  # 900 + 200 would not fit; 900 + 50 does


def test_one_table_under_two_identities_counts_its_rows_once() -> None:
    # two copies of a library (two venvs): two identities, one table, its rows placed once
    a, b = rec("x", 2, rows=600, key="c:same"), RecentFile("h:copy:u1000", "c:same", "/home/u/x.so", 600, 1)
    assert choose([a, b], limit=10, max_rows=1000) == [a, b]


def test_only_tables_on_disk_of_files_found_by_content_are_kept() -> None:
    assert keepable("b:id:1", "c:k", "/usr/lib/x.so", 5)
    assert keepable("h:hash:u1000", "c:k", "/home/u/x.so", 5)
    assert not keepable("f:1:2:3:4:5", "c:k", "/x.so", 5)  # one inode's version: nothing another file may claim
    assert not keepable("b:id:1", "i:08:01:12", "/x.so", 5)  # no copy on disk
    assert not keepable("b:id:1", "c:k", "/x.so", 0)  # no rows to place
    assert not keepable("b:id:1", "c:k", "/x.so (deleted)", 5)
    assert not keepable("b:id:1", "c:k", "/proc/12/map_files/1-2", 5)
    assert not keepable("b:id:1", "c:k", "[vdso]", 5)


def test_uses_are_kept_in_use_order_and_read_back_by_the_next_daemon(tmp_path: Path) -> None:
    r = RecentFiles(tmp_path)
    r.note("b:a:1", "c:a", "/lib/a.so", 10, now=1)
    r.note("b:b:1", "c:b", "/lib/b.so", 20, now=2)
    r.note("b:a:1", "c:a", "/lib/a.so", None, now=3)  # a stand-in's use: no rows given, the record's kept
    r.note("b:z:1", "c:z", "/lib/z.so", None, now=4)  # no record and no rows: none made
    r.note("b:n:1", "c:n", None, 5, now=5)  # no name (the daemon's own prewarm): not a use
    assert r.save()
    assert oct(os.stat(tmp_path / FILE_NAME).st_mode & 0o777) == "0o600"
    again = RecentFiles(tmp_path).records()
    assert [(x.identity, x.rows, x.used) for x in again] == [("b:b:1", 20, 2), ("b:a:1", 10, 3)]
    assert [x.path for x in choose(again, 1, 100)] == ["/lib/a.so"]


def test_last_uses_alone_are_written_at_most_once_an_interval(tmp_path: Path) -> None:
    r = RecentFiles(tmp_path, save_interval_s=3600)
    r.note("b:a:1", "c:a", "/lib/a.so", 10, now=1)
    assert r.save() and not r.save()  # a new file: at once; nothing changed since
    r.note("b:a:1", "c:a", "/lib/a.so", 10, now=2)
    assert not r.save()  # only a last use: within the interval
    assert r.save(force=True)  # the daemon's stop
    assert RecentFiles(tmp_path).records()[0].used == 2


def test_the_least_recently_used_go_past_the_records_kept(tmp_path: Path) -> None:
    r = RecentFiles(tmp_path, max_records=2)
    for i, name in enumerate("abc"):
        r.note(f"b:{name}:1", f"c:{name}", f"/lib/{name}.so", 1, now=i)
    r.save()
    assert [x.identity for x in RecentFiles(tmp_path).records()] == ["b:b:1", "b:c:1"]


@pytest.mark.parametrize("how", ["writable", "garbage", "link"])
def test_a_record_file_not_deepctxds_own_is_ignored(tmp_path: Path, how: str) -> None:
    r = RecentFiles(tmp_path)
    r.note("b:a:1", "c:a", "/lib/a.so", 10, now=1)
    r.save()
    path = tmp_path / FILE_NAME
    if how == "writable":
        path.chmod(0o666)  # someone else could have written it
    elif how == "garbage":
        path.write_text('{"not": "a list"}')
    else:
        other = tmp_path / "other.json"
        path.rename(other)
        path.symlink_to(other)
    assert RecentFiles(tmp_path).records() == []


LIB_C = "int {name}(int x) {{ int y = x; for (int i = 0; i < x; i++) y = y * 3 + i; return y; }}\n"


def _gcc(tmp: Path, name: str, out: Path) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the test libraries")
    src = tmp / f"{name}.c"
    src.write_text(LIB_C.format(name=name))
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-Wl,--build-id=sha1", "-o", str(out), str(src)], check=True)
    return out


def test_a_restarted_cache_reads_a_recent_file_ahead_from_disk_only_while_it_is_the_same_file(tmp_path: Path) -> None:
    lib = _gcc(tmp_path, "alpha", tmp_path / "libalpha.so")
    st = os.stat(lib)
    first = TableCache(tmp_path / "unwind")
    key, table = first.get(str(lib), "00:00", st.st_ino, name=str(lib))
    assert len(table) and first.counters["builds"] == 1
    first.recent.save(force=True)
    # the next daemon: the file's record, its table read from disk (no build), the per-file entry made
    again = TableCache(tmp_path / "unwind")
    (r,) = again.recent.records()
    assert (r.key, r.path, r.rows) == (key, str(lib), len(table))
    got = again.load_ahead(r)
    assert got is not None and got[0] == key and len(got[1]) == len(table)
    assert again.counters["disk_hits"] == 1 and again.counters["builds"] == 0
    assert again.known(str(lib)) == (key, table.base)  # a capture's stand-in finds it, no table read
    # not a use: the record's last use stays the capture's
    assert again.recent.records()[0].used == r.used
    # replaced at its path by another build: another identity, not read ahead (nor built)
    os.replace(_gcc(tmp_path, "beta", tmp_path / "libbeta.so"), lib)
    third = TableCache(tmp_path / "unwind")
    assert third.load_ahead(r) is None
    assert third.counters["disk_hits"] == third.counters["builds"] == 0
    # gone, or something other than a regular file there: nothing
    lib.unlink()
    assert third.load_ahead(r) is None
    os.mkfifo(lib)
    assert third.load_ahead(r) is None


def test_a_recent_file_whose_table_left_the_disk_is_not_built_ahead(tmp_path: Path) -> None:
    lib = _gcc(tmp_path, "gamma", tmp_path / "libgamma.so")
    first = TableCache(tmp_path / "unwind")
    first.get(str(lib), "00:00", os.stat(lib).st_ino, name=str(lib))
    first.recent.save(force=True)
    for f in (tmp_path / "unwind").glob("*.npz"):
        f.unlink()
    again = TableCache(tmp_path / "unwind")
    assert again.load_ahead(again.recent.records()[0]) is None
    assert again.counters["builds"] == 0 and again.known(str(lib)) is None
