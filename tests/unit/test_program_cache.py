"""The compiled-program cache's file and relocations (probes/program_cache.py), and the DEEPCTX_DECLS_ONLY
guards of the BPF C it relies on. The real compile, save, load and refusal are in
tests/integration/test_programs_once.py."""

from __future__ import annotations

import logging
import os
import re
import struct
from pathlib import Path

import pytest

from deepctx.host.private_files import replace_private
from deepctx.probes import program_cache as pc

PROBES = Path(__file__).resolve().parents[2] / "probes"


def insn(code: int, src: int = 0, dst: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("=BBhi", code, (src << 4) | dst, off, imm)


def program() -> bytearray:
    return bytearray(
        insn(pc.LD_IMM64, src=pc.PSEUDO_MAP_FD, dst=1, imm=7) + insn(0)  # r1 = map "counts" (fd 7)
        + insn(0xB7, dst=0, imm=7)  # r0 = 7: an imm of 7 that is no map
        + insn(pc.LD_IMM64, src=0, dst=2, imm=9) + insn(0, imm=1)  # r2 = a 64-bit constant
        + insn(pc.LD_IMM64, src=pc.PSEUDO_MAP_VALUE, dst=3, imm=9) + insn(0, imm=16)  # r3 = &map "cfg"[16]
        + insn(0x95))  # exit


def test_map_loads_are_found_by_name_and_their_fds_zeroed() -> None:
    insns = program()
    relocs = pc._map_loads(insns, {7: "counts", 9: "cfg"}, b"f")
    assert relocs == [(0, "counts"), (5, "cfg")]
    assert struct.unpack_from("=i", insns, 4)[0] == 0 and struct.unpack_from("=i", insns, 5 * 8 + 4)[0] == 0
    assert struct.unpack_from("=i", insns, 3 * 8 + 4)[0] == 9  # a constant, not a map: left as it was
    assert struct.unpack_from("=i", insns, 2 * 8 + 4)[0] == 7
    code = pc.CachedCode({b"f": bytes(insns)}, {b"f": relocs})
    again = code.patched({"counts": 41, "cfg": 42})[b"f"]
    assert struct.unpack_from("=i", again, 4)[0] == 41 and struct.unpack_from("=i", again, 5 * 8 + 4)[0] == 42
    assert again[8:5 * 8] == insns[8:5 * 8] and again[6 * 8:] == insns[6 * 8:]


def test_a_load_of_an_unknown_fd_or_another_kind_is_not_cached() -> None:
    with pytest.raises(ValueError, match="fd 7, none of the program's maps"):
        pc._map_loads(program(), {9: "cfg"}, b"f")
    btf = bytearray(insn(pc.LD_IMM64, src=3, imm=5) + insn(0) + insn(0x95))  # BPF_PSEUDO_BTF_ID
    with pytest.raises(ValueError, match="64-bit load of kind 3"):
        pc._map_loads(btf, {}, b"f")


def test_the_file_round_trips_and_refuses_another_key_or_a_bad_relocation() -> None:
    insns = program()
    code = pc.CachedCode({b"f": bytes(insns)}, {b"f": pc._map_loads(insns, {7: "counts", 9: "cfg"}, b"f")})
    data = pc.dump(code, "k1")
    assert pc.parse(data, "k1") == code
    with pytest.raises(ValueError, match="another format or key"):
        pc.parse(data, "k2")
    bad = data.replace(b'[[0, "counts"]', b'[[2, "counts"]')  # instruction 2 is no 64-bit load
    with pytest.raises(ValueError, match="relocation 2 is not a 64-bit load"):
        pc.parse(bad, "k1")


def test_the_key_follows_the_text_the_flags_and_the_included_headers(tmp_path: Path) -> None:
    base = pc.cache_key("int x;", ["-DA=1"])
    assert base == pc.cache_key("int x;", ["-DA=1"])
    assert len({base, pc.cache_key("int y;", ["-DA=1"]), pc.cache_key("int x;", ["-DA=2"])}) == 3
    (tmp_path / "shared.h").write_text("#define SLOTS 1\n")
    before = pc.cache_key("int x;", [f"-I{tmp_path}"])
    (tmp_path / "shared.h").write_text("#define SLOTS 2\n")  # an included header changed: another program
    assert pc.cache_key("int x;", [f"-I{tmp_path}"]) != before


def saved(tmp_path: Path) -> tuple[pc.ProgramCache, pc.CachedCode]:
    cache = pc.ProgramCache.at(tmp_path / "programs")
    code = pc.CachedCode({b"f": bytes(insn(0x95))}, {b"f": []})
    path = cache.path("k")
    assert path is not None
    replace_private(path, lambda f: f.write(pc.dump(code, "k")))
    return cache, code


def test_a_file_others_may_write_is_not_loaded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache, code = saved(tmp_path)
    assert cache.load("k") == code
    path = cache.path("k")
    assert path is not None and path.stat().st_mode & 0o777 == 0o600
    os.chmod(path, 0o620)
    with caplog.at_level(logging.WARNING, logger="deepctx.programs"):
        assert cache.load("k") is None
    assert "cached program not used" in caplog.text
    os.chmod(path, 0o600)
    link = tmp_path / "programs" / "l.json"
    link.symlink_to(path)
    assert cache.load("l") is None  # a link is not followed


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_file_of_another_owner_is_not_loaded(tmp_path: Path) -> None:
    cache, _ = saved(tmp_path)
    path = cache.path("k")
    assert path is not None
    os.chown(path, 65534, 65534)
    assert cache.load("k") is None


def test_a_refused_key_is_not_loaded_again(tmp_path: Path) -> None:
    cache, code = saved(tmp_path)
    cache.refuse("k", "the verifier said no")
    assert cache.load("k") is None and cache.counters.refused == 1
    assert pc.ProgramCache.at(tmp_path / "programs").load("k") == code  # another daemon may try it again


FUNCTION = re.compile(r"^(static |int )[^;]*\(")
MAP = re.compile(r"^(BPF_\w+\(|NATIVE_EXPORTED\()")


@pytest.mark.parametrize("path", sorted(PROBES.glob("*.bpf.[ch]")), ids=lambda p: p.name)
def test_functions_are_left_out_and_maps_kept_under_decls_only(path: Path) -> None:
    """A cached program compiles its maps only: every function of the families' C under the guard, every map
    outside it (a map left out would be missing from the cached program: it would be compiled again)."""
    depth, guarded, functions = 0, 0, 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("#if"):
            depth += 1
            if line.startswith("#ifndef DEEPCTX_DECLS_ONLY"):
                guarded = depth
        elif line.startswith("#endif"):
            if depth == guarded:
                guarded = 0
            depth -= 1
        elif FUNCTION.match(line) and not line.startswith("static const"):
            functions += 1
            assert guarded, f"{path.name}:{n}: function outside #ifndef DEEPCTX_DECLS_ONLY: {line}"
        elif MAP.match(line):
            assert not guarded, f"{path.name}:{n}: map inside #ifndef DEEPCTX_DECLS_ONLY: {line}"
    if path.name not in ("native_unwind_maps.bpf.h", "walk_slots.bpf.h"):  # maps only; defines only
        assert functions, f"{path.name}: no function found (the pattern no longer matches the C)"


def test_libbcc_is_keyed_by_the_file_the_process_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f10 r-xp 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libbcc_bpf.so.0.26.0\n"
                    "7f20-7f30 r-xp 00000000 08:01 13 /usr/lib/x86_64-linux-gnu/libbcc.so.0.26.0\n"
                    "7f40-7f50 rw-p 00000000 00:00 0 \n")
    assert pc._mapped("libbcc.so", str(maps)) == "/usr/lib/x86_64-linux-gnu/libbcc.so.0.26.0"
    assert pc._mapped("libnothing.so", str(maps)) is None


def test_the_least_recently_used_programs_go_beyond_the_folders_budget(tmp_path: Path) -> None:
    cache = pc.ProgramCache.at(tmp_path / "programs")
    code = pc.CachedCode({b"f": bytes(insn(0x95))}, {b"f": []})
    for i, key in enumerate(["a", "b", "c", "d"]):
        path = cache.path(key)
        assert path is not None
        replace_private(path, lambda f, key=key: f.write(pc.dump(code, key)))
        os.utime(path, ns=(i * 10**9, i * 10**9))  # a oldest, d newest
    assert cache.load("a") == code  # used now: the newest
    assert cache.prune(keep=2) == 2
    assert sorted(p.stem for p in (tmp_path / "programs").iterdir()) == ["a", "d"]


def test_a_file_that_is_not_a_program_is_not_loaded(tmp_path: Path) -> None:
    cache = pc.ProgramCache.at(tmp_path / "programs")
    path = cache.path("k")
    assert path is not None
    for junk in (b"[1, 2]", b"{not json", b'{"format": 1, "key": "k", "functions": {"f": "@@"}, "relocs": {}}'):
        replace_private(path, lambda f, junk=junk: f.write(junk))
        assert cache.load("k") is None, junk
