"""The per-file host cache (host/file_cache.py, host/file_identity.py): LRU eviction under its budget, files
identified by build id or content hash, a library replaced at its path read again, and one entry for two
processes of one program (symbols, unwind tables, the interpreter's layout)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from deepctx.daemon.symbolize.native import SymbolCache
from deepctx.host.elf.reader import ElfFile
from deepctx.host.file_cache import FileCache
from deepctx.host.file_identity import FileIdentities
from deepctx.host.procfs import AddressSpace, Mapping, ProcessMemory, read_maps
from deepctx.host.python.discovery import find_interpreter
from deepctx.host.unwind.cache import TableCache

LIB_C = """
int {name}(int x) {{ int y = x; for (int i = 0; i < x; i++) y = y * 3 + i; return y; }}
int {name}_twice(int x) {{ return {name}(x) + {name}(x + 1); }}
"""


def _gcc(tmp: Path, name: str, out: Path, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the test libraries")
    src = tmp / f"{name}.c"
    src.write_text(LIB_C.format(name=name))
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True)
    return out


class Blob:
    """A value of a known size that takes weak references (as unwind and symbol tables do)."""

    def __init__(self, n: int) -> None:
        self.data = np.zeros(n, np.uint8)


def test_lru_eviction_stays_within_the_budget_and_counts() -> None:
    cache = FileCache(budget_bytes=1000)
    held = {}
    for i, n in enumerate([300, 300, 300]):
        held[i] = Blob(n)
        cache.put(f"b:{i}", "k", held[i], held[i].data.nbytes)
        assert cache.bytes <= 1000
    assert cache.peek("b:0", "k") is held[0]  # 0 is now the most recently used: 1 goes first
    cache.put("b:3", "k", Blob(300), 300)
    assert cache.keys() == [("b:2", "k"), ("b:0", "k"), ("b:3", "k")] and cache.bytes == 900
    big = Blob(700)
    cache.put("b:4", "k", big, big.data.nbytes)  # evicts 2, then 0
    assert cache.keys() == [("b:3", "k"), ("b:4", "k")] and cache.bytes == 1000
    s = cache.stats()
    assert (s["evictions"], s["evicted_bytes"], s["entries"], s["bytes"], s["budget_bytes"]) == (3, 900, 2, 1000, 1000)
    # an evicted value still held elsewhere is found again, not built a second time
    builds: list[int] = []
    assert cache.holds("b:1", "k") and not cache.holds("b:9", "k") and cache.stats()["hits"] == 1
    assert cache.get("b:1", "k", lambda: builds.append(1) or Blob(1), lambda b: b.data.nbytes) is held[1]
    assert builds == [] and cache.stats()["revived"] == 1
    # a value over the whole budget is handed back, never kept
    huge = cache.get("b:5", "k", lambda: Blob(2000), lambda b: b.data.nbytes)
    assert len(huge.data) == 2000 and cache.bytes == 1000 and cache.stats()["not_kept"] == 1
    cache.set_budget(400)  # both left are over it together; 3 then 4, least recently used first
    assert cache.keys() == [] and cache.bytes == 0 and cache.stats()["evictions"] == 5


def test_entry_cap_and_one_build_per_key() -> None:
    cache = FileCache(budget_bytes=1 << 20, max_entries=2)
    calls: list[str] = []
    for key in ("a", "b", "a", "c"):
        cache.get(key, "k", lambda key=key: calls.append(key) or Blob(10), lambda b: b.data.nbytes)
    assert calls == ["a", "b", "c"] and cache.keys() == [("a", "k"), ("c", "k")]
    assert cache.stats()["builds"] == 3 and cache.stats()["hits"] == 1 and cache.stats()["builds_k"] == 3


def test_a_file_without_a_build_id_is_keyed_by_its_content(tmp_path: Path) -> None:
    ids = FileIdentities()
    lib = _gcc(tmp_path, "plain", tmp_path / "libplain.so", "-Wl,--build-id=none")
    with ElfFile(str(lib)) as f:
        assert f.build_id() is None
    import hashlib

    def owner(path: Path) -> str:  # root's files that no one else may write are shared by every user
        st = os.stat(path)
        return "" if st.st_uid == 0 and not st.st_mode & 0o022 else f":u{st.st_uid}"

    expect = hashlib.blake2b(lib.read_bytes(), digest_size=20).hexdigest()
    assert ids.of(str(lib)) == f"h:{expect}{owner(lib)}"
    copy = tmp_path / "elsewhere.so"
    shutil.copy(lib, copy)
    assert ids.of(str(copy)) == ids.of(str(lib))  # same content, another path and inode: one identity
    if os.geteuid() == 0:  # a user's copy is the user's own entry: they may rewrite it while it is read
        os.chown(copy, 65534, 65534)
        assert ids.of(str(copy)) == f"h:{expect}:u65534" != ids.of(str(lib))
    text = tmp_path / "notes.txt"
    text.write_bytes(b"not ELF")
    assert ids.of(str(text)) == f"h:{hashlib.blake2b(b'not ELF', digest_size=20).hexdigest()}{owner(text)}"
    from deepctx.host import file_limits

    saved = (file_limits.LIMITS.max_decompressed_bytes, file_limits.LIMITS.max_unwind_rows)
    try:  # a file over the size cap is not read whole: its fstat fingerprint names it
        file_limits.configure(4, saved[1])
        st = os.stat(text)
        assert FileIdentities().of(str(text)) == f"f:{st.st_dev}:{st.st_ino}:7:{st.st_mtime_ns}:{st.st_ctime_ns}"
    finally:
        file_limits.configure(*saved)
    with_id = _gcc(tmp_path, "plain", tmp_path / "libwithid.so", "-Wl,--build-id=sha1")
    with ElfFile(str(with_id)) as f:
        bid = f.build_id()
    assert ids.of(str(with_id)) == f"b:{bid}:{os.stat(with_id).st_size}{owner(with_id)}"


@pytest.mark.parametrize("how", ["in_place", "rename"])
def test_a_library_replaced_at_its_path_is_read_again(tmp_path: Path, how: str) -> None:
    """Same path, a new build (another build id): symbols and unwind tables are read again, and what
    was read from the old build is never used for the new one. In place keeps the inode, so a cache keyed
    by (device, inode) would hand back the old build's data."""
    path = tmp_path / "libswap.so"
    _gcc(tmp_path, "alpha", path, "-Wl,--build-id=sha1")
    files = FileCache()
    symbols, tables = SymbolCache(files=files), TableCache(files=files)
    st = os.stat(path)
    m = Mapping(0x10000, 0x20000, "r-xp", 0, "00:00", st.st_ino, str(path))
    old = symbols.get(os.getpid(), m)
    assert old is not None and set(old.addresses_of({"alpha", "beta"})) == {"alpha"}
    old_key, old_table = tables.get(str(path), "00:00", st.st_ino)
    new_build = _gcc(tmp_path, "beta", tmp_path / "libbeta.so", "-Wl,--build-id=sha1")
    if how == "in_place":
        path.write_bytes(new_build.read_bytes())
    else:
        os.replace(new_build, path)
    st2 = os.stat(path)
    assert (st2.st_ino == st.st_ino) == (how == "in_place")
    m2 = Mapping(0x10000, 0x20000, "r-xp", 0, "00:00", st2.st_ino, str(path))
    new = symbols.get(os.getpid(), m2)
    assert new is not None and new is not old and set(new.addresses_of({"alpha", "beta"})) == {"beta"}
    assert symbols.loads == 2
    new_key, new_table = tables.get(str(path), "00:00", st2.st_ino)
    assert new_key != old_key and new_table is not old_table and tables.counters["builds"] == 2
    with ElfFile(str(path)) as f:
        assert new_table.build_id == f.build_id() != old_table.build_id


@pytest.fixture
def two_processes(tmp_path: Path) -> Iterator[tuple[list[int], Path]]:
    """Two processes of one program (a Python script), each with the test library loaded."""
    lib = _gcc(tmp_path, "shared", tmp_path / "libshared.so", "-Wl,--build-id=sha1")
    script = ("import ctypes, sys; ctypes.CDLL(sys.argv[1]); print('ready', flush=True); sys.stdin.read()")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(lib)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        yield [p.pid for p in procs], lib
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_two_processes_of_one_program_share_one_entry(two_processes: tuple[list[int], Path]) -> None:
    pids, lib = two_processes
    files = FileCache()
    symbols, tables = SymbolCache(files=files), TableCache(files=files)
    interpreters = []
    for pid in pids:
        space = AddressSpace(read_maps(pid))
        m = next(m for m in space.mappings if m.path == str(lib) and m.executable)
        assert symbols.get(pid, m) is not None
        tables.get(f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}", *m.file_key)
        with ProcessMemory(pid) as mem:
            interpreters.append(find_interpreter(pid, space, mem, files))
    s = files.stats()
    assert symbols.loads == 1 and s["builds_symbols"] == 1
    assert tables.counters["builds"] == 1 and s["builds_unwind"] == 1
    assert s["builds_python"] == 1 and interpreters[0].layout == interpreters[1].layout
    assert interpreters[0].runtime != 0 and interpreters[1].version == interpreters[0].version
    kinds = sorted(k for _, k in files.keys())
    assert kinds.count("symbols") == 1 and kinds.count("unwind") == 1 and kinds.count("python") == 1


def test_the_shared_cache_takes_the_daemons_budget_and_reports_it() -> None:
    from deepctx.host import file_cache

    shared = file_cache.shared()
    before = (shared.budget_bytes, shared.max_entries)
    try:
        file_cache.configure(2 << 20, 7)
        s = file_cache.stats()
        assert (s["budget_bytes"], s["max_entries"]) == (2 << 20, 7)
        assert {"entries", "bytes", "hits", "misses", "builds", "evictions", "evicted_bytes", "not_kept"} <= set(s)
    finally:
        file_cache.configure(*before)


def test_an_interpreter_mapped_under_another_name_does_not_decide_for_the_others(tmp_path: Path) -> None:
    """What an interpreter file says depends on the name it is mapped by (a 't' build is refused): a copy
    of this Python named python3.11t (one identity: root's file, same build id and size) is refused, and
    the same file under its own name is still read."""
    if os.geteuid() != 0 or os.stat(sys.executable).st_uid != 0:
        pytest.skip("one identity for the copy needs root's copy of root's Python")
    pid = os.getpid()
    files = FileCache()
    with ProcessMemory(pid) as mem:
        mine = find_interpreter(pid, AddressSpace(read_maps(pid)), mem, FileCache())
        renamed = tmp_path / f"python{mine.version[0]}.{mine.version[1]}t"
        shutil.copy(mine.path, renamed)
        assert files.identify(str(renamed)) == files.identify(mine.path)
        m = Mapping(0x10000, 0x20000, "r-xp", 0, "00:00", os.stat(renamed).st_ino, str(renamed))
        with pytest.raises(ValueError, match="free-threaded"):
            find_interpreter(pid, AddressSpace([m]), mem, files)
        again = find_interpreter(pid, AddressSpace(read_maps(pid)), mem, files)
    assert (again.version, again.runtime, again.layout) == (mine.version, mine.runtime, mine.layout)
    assert files.stats()["builds_python"] == 2
