"""A restarted daemon places the rows of the files most recently used on its host as it starts (#30:
prewarm_unwind_files, ProfilerService.prewarm_unwind_placements): its first process of those files reads no
table from the disk cache, as a later process does, and still unwinds exactly; a file replaced at its path
since is not served from them; prewarm_unwind_files = 0 turns it off (the first process reads its tables)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Daemon, start_daemon, stop_daemon, wait_for
from profile_paths import self_paths, total

from deepctx.host.file_identity import FileIdentities

pytestmark = pytest.mark.root

TARGETS = Path(__file__).resolve().parents[2] / "targets" / "unwind"
CFLAGS = ["-O2", "-fomit-frame-pointer", "-fno-inline-small-functions"]  # the Makefile's: no frame pointers
# the chain target's stack below its thread, outermost first, as the daemon's profile names it (libc's
# __libc_start_call_main is a local symbol: libc.so.6+offset)
OUTER, CHAIN = ["_start", "__libc_start_main"], ["main", "a", "b", "c"]


def build_target(built: Path, out: Path, marker: str, calls: int = 1) -> Path:
    """unwind_target linked with one more function (marker, its code as long as calls): the same chain, another
    build (ld's build id covers the code, not the symbols' names)."""
    src = out.parent / f"{marker}.c"
    body = " ".join(f"x = ext_{i}(x);" for i in range(calls))
    src.write_text("".join(f"int ext_{i}(int);\n" for i in range(calls))
                   + f"int {marker}(int x) {{ {body} return x; }}\n"
                   + "".join(f"int ext_{i}(int x) {{ return x * {i + 3}; }}\n" for i in range(calls)))
    subprocess.run(["gcc", *CFLAGS, "-o", str(out), str(TARGETS / "target.c"), str(built / "realign.o"),
                    str(built / "debugframe.o"), str(src), f"-L{built}", "-lunwlib", "-ldl",
                    "-Wl,-rpath,$ORIGIN"], check=True)
    return out


def program_dir(built: Path, folder: Path, marker: str, calls: int) -> Path:
    folder.mkdir()
    shutil.copy2(built / "libunwlib.so", folder / "libunwlib.so")
    return build_target(built, folder / "unwind_target", marker, calls)


class Chain:
    """The chain target ("ready chain" once set up), killed on exit."""

    def __init__(self, exe: Path) -> None:
        self.proc = subprocess.Popen([str(exe), "chain"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready chain\n"
        self.pid = self.proc.pid

    def __enter__(self) -> Chain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def totals(d: Daemon) -> dict[str, int]:
    r = d.cli("status", "--format", "json")
    assert r.returncode == 0, r.stderr
    return {k: int(v) for k, v in json.loads(r.stdout)["totals"].items()}  # int64 map values come as strings


def logged(d: Daemon, msg: str) -> dict | None:
    for line in d.log.read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("msg") == msg:
            return json.loads(line)
    return None


def reads(d: Daemon) -> tuple[int, int]:
    """Unwind tables read from the disk cache, and built, since the daemon started."""
    t = totals(d)
    return t.get("unwind_tables_disk_hits", 0), t.get("unwind_tables_builds", 0)


def assert_exact(doc: dict) -> None:
    """9 in 10 samples or more unwound whole: _start, __libc_start_main, one libc frame, main, a, b, c."""
    def whole(names: list[str]) -> bool:
        return len(names) == 8 and names[1:3] == OUTER and names[3].startswith("libc.so") and names[4:] == CHAIN

    paths = [([x["name"] for x in p], v) for p, v in self_paths(doc)]
    n, good = total(doc), sum(v for names, v in paths if whole(names))
    assert n >= 50 and good >= 0.9 * n, f"{good} of {n} samples unwound whole: {sorted(paths, key=lambda p: -p[1])[:5]}"


def restarted(tmp: Path, cache: Path, *keys: str) -> Daemon:
    """A daemon over the cache, its start's prewarm on, once its unwind and symbol prewarms have ended."""
    tmp.mkdir()
    (tmp / "d.toml").write_text("\n".join([f'cache_dir = "{cache}"', *keys]) + "\n")
    d = start_daemon(tmp, "--prewarm", "--config", str(tmp / "d.toml"))
    wait_for(lambda: totals(d).get("unwind_prewarm_done") == totals(d).get("symbol_prewarm_done") == 1,
             timeout=300, what="the unwind and symbol prewarms")
    return d


@pytest.fixture(scope="module")
def used(unwind_targets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(cache, kept program, replaced program): a daemon's disk cache holding the tables of two chain programs'
    files, which its captures used, and the second program's executable replaced by another build since."""
    tmp = tmp_path_factory.mktemp("prewarm_placements")
    cache = tmp / "cache"
    kept = program_dir(unwind_targets, tmp / "kept", "kept_marker", calls=3)
    replaced = program_dir(unwind_targets, tmp / "replaced", "old_marker", calls=1)
    (tmp / "d.toml").write_text(f'cache_dir = "{cache}"\n')
    (tmp / "first").mkdir()
    d = start_daemon(tmp / "first", "--config", str(tmp / "d.toml"))
    try:
        for exe in (kept, replaced):
            with Chain(exe) as t:
                assert d.attach_json(t.pid, "--duration", "1")["ended"] == "duration"
        assert reads(d)[1] >= 4  # the two executables, libunwlib, libc, ld.so: built on this new host
    finally:
        assert stop_daemon(d) == 0, d.log.read_text()[-3000:]
    assert (cache / "unwind" / "recent.v1.json").exists()
    assert (cache / "symbols" / "recent_uses.v1.json").exists()
    new = build_target(unwind_targets, tmp / "replacement", "new_marker", calls=2)
    new.replace(replaced)  # a new build at the same path: another identity
    yield cache, kept, replaced


def test_a_restarted_daemons_first_process_of_recent_files_reads_no_table(used: tuple[Path, Path, Path],
                                                                          tmp_path: Path) -> None:
    cache, kept, replaced = used
    d = restarted(tmp_path / "d", cache)
    try:
        done = logged(d, "unwind rows prewarmed")
        assert done is not None, d.log.read_text()[-3000:]
        # every recorded file placed but the replaced executable (another file at its path now)
        assert done["passed"] == 1 and done["files"] == done["of"] - 1 >= 3, done
        t = totals(d)
        assert t["unwind_prewarm_files"] == done["files"] and t["unwind_prewarm_rows"] > 0
        assert t["unwind_prewarm_ms"] >= 0 and t["unwind_prewarm_cpu_ms"] >= 0
        status = d.cli("status")
        assert f"unwind prewarm: {done['files']} tables" in status.stdout, status.stdout
        before = reads(d)
        with Chain(kept) as p:
            doc = d.attach_json(p.pid, "--duration", "2")
        assert reads(d) == before, "the first process of prewarmed files read or built a table"
        assert_exact(doc)
        # the replaced executable is not served from the prewarm: its own table is built (its CFI is new), every
        # other file of its process is (libunwlib, libc, ld.so: no read)
        with Chain(replaced) as p:
            doc = d.attach_json(p.pid, "--duration", "2")
        assert reads(d) == (before[0], before[1] + 1)
        assert_exact(doc)
    finally:
        assert stop_daemon(d) == 0, d.log.read_text()[-3000:]


def test_prewarm_unwind_files_0_turns_it_off(used: tuple[Path, Path, Path], tmp_path: Path) -> None:
    cache, kept, _ = used
    d = restarted(tmp_path / "d", cache, "prewarm_unwind_files = 0")
    try:
        assert logged(d, "unwind rows prewarmed") is None
        t = totals(d)
        assert t["unwind_prewarm_files"] == t["unwind_prewarm_rows"] == 0
        before = reads(d)
        with Chain(kept) as p:
            doc = d.attach_json(p.pid, "--duration", "2")
        disk, built = reads(d)
        assert built == before[1] and disk >= before[0] + 3  # the executable, libunwlib, libc at least
        assert_exact(doc)
    finally:
        assert stop_daemon(d) == 0, d.log.read_text()[-3000:]


def test_a_restarted_daemons_first_process_of_recent_files_loads_no_symbol_table(used: tuple[Path, Path, Path],
                                                                                tmp_path: Path) -> None:
    """The symbol tables earlier daemons' captures loaded (the executables, libc) are built at the next start (prewarm_symbol_files): its first process of those files loads none; the replaced executable is
    not taken from its earlier build's record (another file at the path): its process loads that one table,
    unless a test before this one recorded the new build."""
    cache, kept, replaced = used
    recorded = json.loads((cache / "symbols" / "recent_uses.v1.json").read_text())
    new_known = any(r["identity"] == FileIdentities().of(str(replaced)) for r in recorded)
    d = restarted(tmp_path / "d", cache)
    try:
        done = logged(d, "symbol tables prewarmed")
        assert done is not None, d.log.read_text()[-3000:]
        # every recorded file built but the replaced executable's earlier builds (another file at its path now;
        # the tests before this one used its second)
        assert done["passed"] >= 1 and done["files"] == done["of"] - done["passed"] >= 2, done
        t = totals(d)
        assert t["symbol_prewarm_files"] == done["files"] and t["symbol_prewarm_passed"] == done["passed"]
        assert t["symbol_files_loaded"] == done["files"]  # the prewarm's, and no other yet
        assert "symbol prewarm: " in d.cli("status").stdout
        before = t["symbol_files_loaded"]
        with Chain(kept) as p:
            doc = d.attach_json(p.pid, "--duration", "2")
        assert totals(d)["symbol_files_loaded"] == before, "the first process of prewarmed files loaded a symbol table"
        assert_exact(doc)  # named as ever: main, a, b, c from the prewarmed tables
        with Chain(replaced) as p:
            doc = d.attach_json(p.pid, "--duration", "2")
        assert totals(d)["symbol_files_loaded"] == before + (not new_known)  # the new executable's own
        assert_exact(doc)
    finally:
        assert stop_daemon(d) == 0, d.log.read_text()[-3000:]


def test_prewarm_symbol_files_0_turns_it_off(used: tuple[Path, Path, Path], tmp_path: Path) -> None:
    cache, kept, _ = used
    d = restarted(tmp_path / "d", cache, "prewarm_symbol_files = 0")
    try:
        assert logged(d, "symbol tables prewarmed") is None
        t = totals(d)
        assert t["symbol_prewarm_files"] == 0 and t.get("symbol_files_loaded", 0) == 0
        with Chain(kept) as p:
            d.attach_json(p.pid, "--duration", "2")
        assert totals(d)["symbol_files_loaded"] >= 2  # the executable, libc
    finally:
        assert stop_daemon(d) == 0, d.log.read_text()[-3000:]
