"""The one ELF reader (host/elf/reader.py) and what is built on it, checked against readelf on files built
here: 64-bit and 32-bit (symbols are read from either; unwind tables only from 64-bit files)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deepctx.host.elf.image import ElfImage
from deepctx.host.elf.reader import ElfError, ElfFile
from deepctx.host.elf.symbols import ElfSymbols

SOURCE = "int foo(void) { return 1; }\nint bar = 3;\n"
EMULATION = {64: "elf_x86_64", 32: "elf_i386"}


def build(tmp_path: Path, bits: int) -> Path:
    if not shutil.which("gcc") or not shutil.which("ld"):
        pytest.skip("gcc and ld build the files")
    src, obj, lib = tmp_path / "e.c", tmp_path / "e.o", tmp_path / f"libe{bits}.so"
    src.write_text(SOURCE)
    subprocess.run(["gcc", f"-m{bits}", "-c", "-o", obj, src], check=True)
    subprocess.run(["ld", "-m", EMULATION[bits], "-shared", "--build-id=sha1", "-o", lib, obj], check=True)
    return lib


def readelf_symbol(lib: Path, name: str) -> tuple[int, int]:
    out = subprocess.run(["readelf", "-sW", lib], check=True, capture_output=True, text=True).stdout
    m = re.search(rf"^\s*\d+: ([0-9a-f]+)\s+(\d+) \w+\s+GLOBAL\s+\w+\s+\d+ {name}$", out, re.M)
    assert m, out
    return int(m.group(1), 16), int(m.group(2))


def readelf_build_id(lib: Path) -> str:
    out = subprocess.run(["readelf", "-n", lib], check=True, capture_output=True, text=True).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", out).group(1)


@pytest.mark.parametrize("bits", [64, 32])
def test_symbols_build_id_and_segments_as_readelf_reads_them(tmp_path: Path, bits: int) -> None:
    lib = build(tmp_path, bits)
    foo, bar = readelf_symbol(lib, "foo"), readelf_symbol(lib, "bar")
    with ElfFile(str(lib), allow_32bit=True) as f:
        assert f.elfclass == bits and f.is_shared
        assert f.build_id() == readelf_build_id(lib)
        loads = f.load_segments()
    syms = ElfSymbols(str(lib))
    try:
        assert syms.build_id == readelf_build_id(lib)
        assert syms.addresses_of({"foo", "bar"}) == {"foo": foo[0]}  # functions only
        assert syms.lookup(foo[0] + 3) == ("foo", 3)
        assert syms.segments == loads
    finally:
        syms.close()
    with ElfImage(str(lib)) as image:
        assert image.symbol("bar") == bar and image.symbol("foo") == foo
        assert image.symbol("nothing") is None
        assert image.segments == loads


def test_unwind_tables_read_64_bit_files_only(tmp_path: Path) -> None:
    lib = build(tmp_path, 32)
    with pytest.raises(ElfError, match="only 64-bit little-endian ELF is supported"):
        ElfFile(str(lib))


def test_not_an_elf_file_is_an_elf_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an ELF file at all")
    for read in (ElfFile, ElfSymbols, ElfImage):
        with pytest.raises(ElfError, match="not an ELF file"):
            read(str(junk))
