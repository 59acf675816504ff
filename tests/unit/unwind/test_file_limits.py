"""Caps on a target's files: streamed decompression never yields more than the cap (or than a section
declares), tables over max_unwind_rows are refused, and the table cache keys files by their CFI bytes,
not by a build id an attacker can copy."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from deepctx.host import file_limits
from deepctx.host.elf.reader import ElfFile
from deepctx.host.file_limits import OverCap, inflate
from deepctx.host.unwind.cache import TableCache
from deepctx.host.unwind.table import build_table

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("objcopy") is None,
                               reason="gcc and objcopy build the test libraries")

SRC_A = "int f(int x) { return x * 3; }\nint g(int x) { int a[8]; a[x & 7] = x; return f(a[1]); }\n"
SRC_B = "int h(long x) { volatile long b[64]; b[x & 63] = x; return (int)b[3]; }\n"


def test_inflate_stops_at_the_cap_before_decompressing() -> None:
    bomb = zlib.compress(b"\0" * (8 << 20), 9)
    with pytest.raises(OverCap, match=r"over the cap of 1048576 bytes \(max_decompressed_bytes\)"):
        inflate(bomb, 8 << 20, "lib.so: section .debug_frame", cap=1 << 20)


def test_inflate_never_yields_more_than_declared() -> None:
    """A header that declares 1 KiB of a bomb of 64 MiB: decompression stops after 1 KiB + 1 byte."""
    bomb = zlib.compress(b"\0" * (64 << 20), 9)
    with pytest.raises(ValueError, match="decompresses to more bytes than the 1024 it declares"):
        inflate(bomb, 1024, "x", cap=1 << 20)
    assert inflate(zlib.compress(b"abc"), 3, "x", cap=1 << 20) == b"abc"
    with pytest.raises(ValueError, match="fewer bytes than the 10"):
        inflate(zlib.compress(b"abc"), 10, "x", cap=1 << 20)
    with pytest.raises(ValueError, match="corrupt compressed data"):
        inflate(b"not zlib", 10, "x", cap=1 << 20)


def _so(tmp: Path, name: str, src: str, build_id: str | None = None, *flags: str) -> Path:
    c = tmp / f"{name}.c"
    c.write_text(src)
    out = tmp / f"lib{name}.so"
    bid = [f"-Wl,--build-id=0x{build_id}"] if build_id else []
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", *flags, *bid, "-o", str(out), str(c)], check=True)
    return out


def compressed_debug_frame(lib: Path, declared: int, payload: bytes) -> None:
    """Gives lib a SHF_COMPRESSED .debug_frame: an Elf64_Chdr declaring `declared` bytes, then payload."""
    blob = lib.with_suffix(".blob")
    blob.write_bytes(struct.pack("<IIQQ", 1, 0, declared, 1) + payload)
    subprocess.run(["objcopy", "--remove-section", ".debug_frame", "--add-section", f".debug_frame={blob}",
                    str(lib)], check=True)
    data = bytearray(lib.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    names = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 24)[0]
    for i in range(shnum):
        at = shoff + i * shentsize
        name_at = names + struct.unpack_from("<I", data, at)[0]
        if bytes(data[name_at:name_at + 13]) == b".debug_frame\0":
            flags, = struct.unpack_from("<Q", data, at + 8)
            struct.pack_into("<Q", data, at + 8, flags | 0x800)  # SHF_COMPRESSED
    lib.write_bytes(bytes(data))


def zeros_bomb(size: int) -> bytes:
    """zlib of a record header that runs past the section, then zeros: parsing it would stop at once."""
    z = zlib.compressobj(9)
    out = [z.compress(struct.pack("<I", 0xFFFFFFF0))]
    chunk = b"\0" * (1 << 20)
    left = size - 4
    while left > 0:
        out.append(z.compress(chunk[:left]))
        left -= len(chunk)
    return b"".join(out) + z.flush()


@needs_gcc
def test_a_compressed_debug_frame_over_the_cap_is_refused_with_a_warning(tmp_path: Path) -> None:
    lib = _so(tmp_path, "bomb", SRC_A)
    compressed_debug_frame(lib, 64 << 20, zeros_bomb(64 << 20))
    cap = file_limits.LIMITS.max_decompressed_bytes
    file_limits.configure(16 << 20, file_limits.LIMITS.max_unwind_rows)
    try:
        with ElfFile(str(lib)) as f:
            assert f.data_size(".debug_frame") == 64 << 20  # from the header: nothing inflated
            with pytest.raises(OverCap):
                f.section_data(".debug_frame")
        for child_min in (0, 1 << 40):  # in a child process, and in the daemon
            cache = TableCache(child_min_bytes=child_min)
            _, table = cache.get(str(lib), "00:01", 5)
            assert len(table) == 0 and cache.counters["over_cap"] == 1 and cache.counters["builds"] == 0
            assert table.warning == (f"section .debug_frame is {64 << 20} bytes once decompressed, over "
                                     f"the cap of {16 << 20} bytes (max_decompressed_bytes): refused")
    finally:
        file_limits.configure(cap, file_limits.LIMITS.max_unwind_rows)


@needs_gcc
def test_a_table_over_max_unwind_rows_is_refused(tmp_path: Path) -> None:
    lib = _so(tmp_path, "rows", SRC_A + SRC_B)
    rows = len(build_table(str(lib), max_rows=1 << 20))
    assert rows > 2
    with pytest.raises(OverCap, match=r"more than 2 rows \(max_unwind_rows\)"):
        build_table(str(lib), max_rows=2)


@needs_gcc
@pytest.mark.parametrize("child_min", [0, 1 << 40])
def test_two_files_with_one_build_id_get_their_own_tables(tmp_path: Path, child_min: int) -> None:
    """A user's library made with libtorch's build id is not taken for libtorch: neither in memory nor on
    disk, whichever is read first, and a restarted cache still tells them apart."""
    bid = "5eed" * 10
    user = _so(tmp_path, "user", SRC_B, bid)
    root = _so(tmp_path, "root", SRC_A, bid)
    with ElfFile(str(user)) as u, ElfFile(str(root)) as r:
        assert u.build_id() == r.build_id() == bid
    disk = tmp_path / "cache"
    cache = TableCache(disk, child_min_bytes=child_min)
    ku, tu = cache.get(str(user), "00:01", 1)
    kr, tr = cache.get(str(root), "00:01", 2)
    assert ku != kr and tu is not tr and cache.counters["builds"] == 2 and cache.counters["hits"] == 0
    want = build_table(str(root))
    assert tr.pcs.tolist() == want.pcs.tolist() and tr.rules == want.rules
    assert tu.pcs.tolist() != want.pcs.tolist()
    assert sorted(p.name for p in disk.iterdir()) == sorted([f"{ku[2:]}.v2.npz", f"{kr[2:]}.v2.npz"])
    again = TableCache(disk)
    k2, t2 = again.get(str(root), "00:01", 3)
    assert k2 == kr and again.counters["disk_hits"] == 1 and t2.pcs.tolist() == want.pcs.tolist()


def test_the_disk_cache_is_root_only_and_links_are_not_followed(tmp_path: Path) -> None:
    disk = tmp_path / "cache"
    disk.mkdir(mode=0o777)
    os.chmod(disk, 0o777)
    TableCache(disk)
    assert (os.stat(disk).st_mode & 0o777) == 0o700
    link = tmp_path / "link"
    link.symlink_to(disk)
    assert TableCache(link).disk_dir is None
    from deepctx.host.unwind.disk import load_table
    target = tmp_path / "elsewhere.npz"
    target.write_bytes(b"x")
    (disk / "planted.v2.npz").symlink_to(target)
    with pytest.raises(OSError):
        load_table(disk / "planted.v2.npz", None)
