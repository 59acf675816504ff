"""CFI parsing, rule compilation, table layout, placement in the maps, and the per-file cache."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from deepctx.host import procfs
from deepctx.host.elf.reader import ElfFile
from deepctx.host.unwind import arch, interp
from deepctx.host.unwind.arch import (
    AARCH64,
    CFA_DEREF_FP,
    CFA_END,
    CFA_PLT,
    CFA_SP,
    FP_CFA,
    FP_FP,
    FP_SAME,
    INFO_NONE,
    INFO_UNSUPPORTED,
    RA_CFA,
    RA_LR,
    X86_64,
    compile_state,
)
from deepctx.host.unwind.cache import TableCache
from deepctx.host.unwind.cfi import iter_fdes, read_sleb, read_uleb
from deepctx.host.unwind.space import TableSpace, page_index
from deepctx.host.unwind.table import _Builder, build_table

# --- hand-made .eh_frame --------------------------------------------------------------------------

CIE_INIT = bytes([0x0C, 0x07, 0x08, 0x90, 0x01])  # def_cfa rsp+8; offset r16 (ra) at cfa-8


def _cie(aug: bytes = b"zR", enc: int = 0x1B, wide: bool = False) -> bytes:
    body = bytes([1]) + aug + b"\0" + bytes([1, 0x78, 16])  # version, aug, caf 1, daf -8, ra 16
    if aug:
        body += bytes([1, enc])
    body += CIE_INIT
    ident = struct.pack("<Q" if wide else "<I", 0)
    rec = ident + body
    return (struct.pack("<IQ", 0xFFFFFFFF, len(rec)) if wide else struct.pack("<I", len(rec))) + rec


def _fde(cie_at: int, here: int, section_addr: int, begin: int, size: int, code: bytes) -> bytes:
    """An FDE with pcrel sdata4 addresses, placed at offset `here` of the section."""
    pc_field = section_addr + here + 8
    body = struct.pack("<iI", begin - pc_field, size) + b"\0" + code
    return struct.pack("<II", len(body) + 4, here + 4 - cie_at) + body


def _section(fdes: list[tuple[int, int, bytes]], addr: int = 0x10000) -> bytes:
    data = _cie()
    for begin, size, code in fdes:
        data += _fde(0, len(data), addr, begin, size, code)
    return data + b"\0\0\0\0"


def _table(data: bytes, addr: int = 0x10000, native: bool = True):
    b = _Builder(X86_64, native=native)
    b.add_section(0, data, addr, True, None)
    return b.finish(None), b


def test_leb128():
    assert read_uleb(bytes([0xE5, 0x8E, 0x26]), 0) == (624485, 3)
    assert read_sleb(bytes([0xC0, 0xBB, 0x78]), 0) == (-123456, 3)
    assert read_sleb(bytes([0x7F]), 0) == (-1, 1)


def test_push_pop_function_rows_and_gaps():
    code = bytes(
        [
            0x41,
            0x0E,
            0x10,
            0x86,
            0x02,  # +1: cfa rsp+16; rbp at cfa-16
            0x43,
            0x0D,
            0x06,  # +3: cfa register rbp
            0x0A,  # remember_state
            0x48,
            0x0C,
            0x07,
            0x08,  # +8: cfa rsp+8 (epilogue: leave)
            0x41,
            0x0B,  # +1 (ret): restore_state for the code after the ret
            0x41,  # +1
        ]
    )
    t, b = _table(_section([(0x1000, 0x20, code), (0x1100, 0x10, b"")]))
    assert not b.errors
    assert t.rule_at(0x1000) == (CFA_SP, 0, 8, FP_SAME, 0, RA_CFA, -8)
    assert t.rule_at(0x1001) == (CFA_SP, 0, 16, FP_CFA, -16, RA_CFA, -8)
    assert t.rule_at(0x1004) == (arch.CFA_FP, 0, 16, FP_CFA, -16, RA_CFA, -8)
    assert t.rule_at(0x100C) == (CFA_SP, 0, 8, FP_CFA, -16, RA_CFA, -8)
    assert t.rule_at(0x100D) == (arch.CFA_FP, 0, 16, FP_CFA, -16, RA_CFA, -8)  # restored state
    assert t.rule_at(0x101F) == (arch.CFA_FP, 0, 16, FP_CFA, -16, RA_CFA, -8)
    assert t.rule_at(0x1020) == INFO_NONE  # gap between FDEs: frame pointers
    assert t.rule_at(0x1100) == (CFA_SP, 0, 8, FP_SAME, 0, RA_CFA, -8)
    assert t.rule_at(0x1110) == INFO_NONE
    assert t.rule_at(0xFFF) == INFO_NONE
    # rows are merged where the rule does not change, and pcs are relative to the first FDE
    assert t.base == 0x1000 and list(np.diff(t.pcs.astype(np.int64)) > 0) == [True] * (len(t) - 1)


@pytest.mark.parametrize("native", [False, True], ids=["python", "cfi_rows.c"])
def test_bad_fde_is_skipped_and_reported(native: bool):
    t, b = _table(_section([(0x1000, 0x10, bytes([0x0B])), (0x2000, 0x10, bytes([0x3F])), (0x3000, 8, b"")]),
                  native=native)
    assert len(b.errors) == 2
    if not native:  # the C rows count what they skip; Python's reference says why
        assert "restore_state" in b.errors[0] and "0x3f" in b.errors[1]
    assert t.rule_at(0x1000) == INFO_NONE and t.rule_at(0x2000) == INFO_NONE
    assert t.rule_at(0x3000)[0] == CFA_SP


def test_wide_records_and_absolute_pointers():
    cie = _cie(enc=0x04, wide=True)  # udata8 absolute FDE pointers, 64-bit lengths
    body = struct.pack("<QQ", 0x4000, 0x10) + b"\0" + bytes([0x44, 0x0E, 0x20])
    fde = struct.pack("<IQ", 0xFFFFFFFF, len(body) + 8) + struct.pack("<Q", len(cie) + 12 - 0) + body
    fdes = list(iter_fdes(cie + fde, 0, True))
    assert [(f.pc_begin, f.pc_end) for f in fdes] == [(0x4000, 0x4010)]


def test_compile_state_x86_64_expressions():
    plt = bytes([0x77, 0x08, 0x80, 0x00, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22])
    ra = (interp.OFFSET, -8)
    s = interp.State(-1, 0, plt, interp.RULE_UNSET, ra)
    assert compile_state(s, X86_64) == (CFA_PLT, 11, 8, FP_SAME, 0, RA_CFA, -8)
    drap = interp.State(-1, 0, bytes([0x76, 0x78, 0x06]), (interp.EXPR, bytes([0x76, 0x00])), ra)
    assert compile_state(drap, X86_64) == (CFA_DEREF_FP, 0, -8, FP_FP, 0, RA_CFA, -8)
    assert compile_state(interp.State(10, 0, None, interp.RULE_UNSET, ra), X86_64) == INFO_UNSUPPORTED  # r10
    assert compile_state(interp.State(7, 1 << 40, None, interp.RULE_UNSET, ra), X86_64) == INFO_UNSUPPORTED
    assert compile_state(interp.State(7, 8, None, interp.RULE_UNSET, (interp.UNDEF, 0)), X86_64)[0] == CFA_END


def test_compile_state_arm64():
    # entry: CFA = sp, return address still in x30; body: x29/x30 saved at CFA-16/-8, CFA = x29 + 16
    assert compile_state(interp.State(31, 0, None, interp.RULE_UNSET, interp.RULE_UNSET), AARCH64) == (
        CFA_SP,
        0,
        0,
        FP_SAME,
        0,
        RA_LR,
        0,
    )
    body = interp.State(29, 16, None, (interp.OFFSET, -16), (interp.OFFSET, -8))
    assert compile_state(body, AARCH64) == (arch.CFA_FP, 0, 16, FP_CFA, -16, RA_CFA, -8)


# --- real files -------------------------------------------------------------------------------------


def _symbol(path: str, name: str) -> tuple[int, int]:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for sec in ("symtab", "dynsym"):
            s = elf.get_section_by_name("." + sec)
            if s is not None and (sym := s.get_symbol_by_name(name)):
                return sym[0]["st_value"], sym[0]["st_size"]
    raise KeyError(name)


def test_target_rules(unwind_targets):
    exe = str(unwind_targets / "unwind_target")
    t = build_table(exe)
    start, size = _symbol(exe, "realign")
    rules = {t.rule_at(pc) for pc in range(start, start + size)}
    assert (CFA_DEREF_FP, 0, -8, FP_FP, 0, RA_CFA, -8) in rules
    start, size = _symbol(exe, "via_debug_frame")  # only .debug_frame describes it
    assert {t.rule_at(pc)[0] for pc in range(start, start + size)} == {CFA_SP}
    with ElfFile(exe) as f:
        plt = f.sections[".plt"]
    assert {t.rule_at(plt.addr + 16 + i)[:2] for i in range(16)} == {(CFA_PLT, 11)}
    assert t.stats["errors"] == 0


def test_load_bias_of_a_live_mapping():
    libc_path = ctypes.util.find_library("c")
    libc = ctypes.CDLL(libc_path)
    runtime = ctypes.cast(libc.qsort, ctypes.c_void_p).value
    m = procfs.AddressSpace(procfs.read_maps(procfs.os.getpid())).find(runtime)
    assert m is not None and m.executable
    path = procfs.open_mapped_file(procfs.os.getpid(), m)
    with ElfFile(path) as f:
        bias = f.load_bias(m.start, m.offset)
    assert runtime - bias == _symbol(path, "qsort")[0]


def test_table_space_places_once_and_counts_what_does_not_fit(unwind_targets):
    t = build_table(str(unwind_targets / "libunwlib.so"))
    space = TableSpace(max_rows=len(t) * 2 + 1, max_pages=1 << 10, max_rules=64, page_shift=12)
    up = space.place("a", t)
    assert up is not None and up.rows_start == 0 and len(up.rows) == len(t)
    assert space.place("a", t) is None and space.placement("a").rows_len == len(t)
    up2 = space.place("b", t)
    assert up2 is not None and up2.rows_start == len(t) and up2.rules == []  # rules are shared
    assert space.place("c", t) is None and space.placement("c").rows_len == 0
    assert space.counters["files_dropped"] == 1 and space.counters["rows_dropped"] == len(t)
    # row layout: pc | rule << 32, rule indices global
    glob = dict((r, i) for i, r in space.initial_rules() + up.rules)
    for row, pc, local in zip(up.rows.tolist(), t.pcs.tolist(), t.infos.tolist(), strict=True):
        assert row & 0xFFFFFFFF == pc and row >> 32 == glob[t.rules[local]]


def test_table_space_rules_overflow_maps_to_unsupported(unwind_targets):
    t = build_table(str(unwind_targets / "unwind_target"))
    space = TableSpace(max_rows=1 << 16, max_pages=1 << 10, max_rules=4, page_shift=12)
    up = space.place("x", t)
    known = len({INFO_NONE, INFO_UNSUPPORTED} & set(t.rules))
    assert (
        up is not None and len(up.rules) == 2 and space.counters["rules_dropped"] == len(t.rules) - known - 2
    )
    assert set((up.rows >> np.uint64(32)).tolist()) <= {0, 1, 2, 3}


def test_cache_parses_each_file_once_and_keeps_tables_on_disk(unwind_targets, tmp_path):
    lib = str(unwind_targets / "libunwlib.so")
    st = procfs.os.stat(lib)
    dev = f"{st.st_dev >> 8:02x}:{st.st_dev & 0xFF:02x}"
    cache = TableCache(tmp_path)
    k1, t1 = cache.get(lib, dev, st.st_ino)
    k2, t2 = cache.get(lib, dev, st.st_ino)
    assert k1 == k2 and t1 is t2 and k1.startswith("c:") and cache.counters["builds"] == 1
    fresh = TableCache(tmp_path)  # a restarted daemon
    k3, t3 = fresh.get(lib, "00:00", 1)
    assert k3 == k1 and fresh.counters == {"builds": 0, "hits": 0, "disk_hits": 1, "failures": 0, "child_builds": 0, "over_cap": 0}
    assert t3.base == t1.base and np.array_equal(t3.pcs, t1.pcs) and np.array_equal(t3.infos, t1.infos)
    assert t3.rules == t1.rules


def _same_table(a, b) -> bool:
    return (a.arch, a.base, a.rules) == (b.arch, b.base, b.rules) and np.array_equal(a.pcs, b.pcs) \
        and np.array_equal(a.infos, b.infos)


@pytest.mark.parametrize("on_disk", [False, True])
def test_a_large_file_is_built_in_a_child_process_into_the_same_table(unwind_targets, tmp_path, on_disk):
    """Over child_min_bytes of unwind sections the table comes from build_child, row for row the table
    built in the daemon; with a disk cache the child writes it there, so a restarted daemon reads it."""
    lib = str(unwind_targets / "libunwlib.so")
    cache = TableCache(tmp_path if on_disk else None, child_min_bytes=0)
    key, table = cache.get(lib, "00:02", 7)
    assert cache.counters == {"builds": 1, "hits": 0, "disk_hits": 0, "failures": 0, "child_builds": 1, "over_cap": 0}
    assert len(table) > 0 and _same_table(table, build_table(lib))
    assert [p.name for p in tmp_path.iterdir()] == ([f"{key[2:]}.v2.npz"] if on_disk else [])
    in_daemon = TableCache(child_min_bytes=1 << 40)
    in_daemon.get(lib, "00:02", 7)
    assert in_daemon.counters["child_builds"] == 0 and in_daemon.counters["builds"] == 1


def test_a_child_built_table_is_kept_when_the_disk_cache_is_unusable(unwind_targets, tmp_path):
    lib = str(unwind_targets / "libunwlib.so")
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("a file where the cache folder should be")
    cache = TableCache(not_a_dir, child_min_bytes=0)
    _, table = cache.get(lib, "00:02", 7)
    assert cache.counters["child_builds"] == 1 and cache.counters["failures"] == 0
    assert _same_table(table, build_table(lib)) and sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_a_file_the_child_finds_no_table_in_gets_an_empty_table(tmp_path):
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF but nothing after")
    cache = TableCache(child_min_bytes=0)
    key, table = cache.get(str(junk), "00:01", 43)
    assert key == "i:00:01:43" and len(table) == 0
    assert cache.counters == {"builds": 0, "hits": 0, "disk_hits": 0, "failures": 1, "child_builds": 0, "over_cap": 0}


def test_get_many_builds_a_file_once_however_many_ask_at_once(unwind_targets):
    lib = str(unwind_targets / "libunwlib.so")
    exe = str(unwind_targets / "unwind_target")
    cache = TableCache(child_min_bytes=0, workers=4)
    got = cache.get_many([(lib, "00:02", 7)] * 3 + [(exe, "00:02", 8), (str(unwind_targets / "gone.so"), "00:02", 9)])
    assert [g[0] for g in got[:3]] == [got[0][0]] * 3 and all(g[1] is got[0][1] for g in got[:3])
    assert len(got[3][1]) > 0 and isinstance(got[4], FileNotFoundError)
    assert cache.counters["builds"] == 2 and cache.counters["child_builds"] == 2 and cache.counters["hits"] == 2


def test_cache_gives_files_without_cfi_an_empty_table(tmp_path):
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an ELF file at all")
    cache = TableCache()
    key, table = cache.get(str(junk), "00:01", 42)
    assert key == "i:00:01:42" and len(table) == 0 and cache.counters["failures"] == 1



def _bpf_lookup(pcs: np.ndarray, pages: np.ndarray, x: int, shift: int) -> int | None:
    """native_find_info's search, step for step: the page index, then a branch-free lower bound."""
    page = x >> shift
    if page + 1 >= len(pages):
        return None
    base, length = int(pages[page]), int(pages[page + 1]) - int(pages[page]) + 1
    for _ in range(shift + 1):
        if length <= 1:
            break
        half = length >> 1
        base += 0 if x < int(pcs[base + half]) else half
        length -= half
    return None if int(pcs[base]) > x else base


@pytest.mark.parametrize("shift", [4, 12])
def test_page_index_search_finds_the_row_a_full_search_finds(shift):
    t = build_table("/lib/x86_64-linux-gnu/libc.so.6")
    pages = page_index(t.pcs, 0, shift)
    assert len(pages) == t.pages(shift)
    rng = np.random.default_rng(1)
    span = int(t.pcs[-1])
    xs = np.concatenate(
        [t.pcs.astype(np.int64), t.pcs.astype(np.int64) - 1, rng.integers(0, span + 64, 20000)]
    )
    rows_per_page = np.diff(pages.astype(np.int64)) + 1
    assert rows_per_page.max() <= (1 << shift) + 1  # what NATIVE_ROW_SEARCH_STEPS assumes
    for x in xs.tolist():
        if x < 0:
            continue
        want = int(np.searchsorted(t.pcs, x, side="right")) - 1  # past the span: the final CFA_NONE row
        assert _bpf_lookup(t.pcs, pages, x, shift) == (want if x >> shift < len(pages) - 1 else None), x


def test_a_restarted_cache_removes_scratch_folders_older_than_a_build(tmp_path):
    """A daemon killed mid-build leaves its scratch folder in the cache; the next one removes it, but not a
    folder young enough to be another daemon's build in progress, nor anything else there."""
    import os
    import time

    from deepctx.host.unwind import cache as cache_mod

    stale, young = tmp_path / f"{cache_mod.SCRATCH_PREFIX}old", tmp_path / f"{cache_mod.SCRATCH_PREFIX}new"
    for d in (stale, young):
        d.mkdir()
        (d / "table.npz").write_bytes(b"half written")
    other = tmp_path / "0123abcd.v1.npz"
    other.write_bytes(b"a table")
    old = time.time() - cache_mod.CHILD_TIMEOUT_S - 120
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    TableCache(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([young.name, other.name])
