"""/proc parsing: maps lines, address lookup, keeping mappings that went away during a capture."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from deepctx.host.procfs import AddressSpace, Mapping, ProcessMemory, environ_value, parse_maps, process_info
from deepctx.probes.device_activity import expected_agent

MAPS = """\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234   /usr/bin/app
55d0c0a01000-55d0c0a05000 r-xp 00001000 fd:01 1234   /usr/bin/app
7f1200000000-7f1200021000 rw-p 00000000 00:00 0
7f1300000000-7f1300100000 r-xp 00028000 fd:01 99     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1400000000-7f1400002000 r-xp 00000000 fd:01 77     /tmp/my lib (deleted)
7ffd1c3fe000-7ffd1c400000 r-xp 00000000 00:00 0      [vdso]
"""


def test_parse_maps_reads_every_field() -> None:
    maps = parse_maps(MAPS)
    assert len(maps) == 6
    text = maps[1]
    assert (text.start, text.end, text.perms, text.offset, text.dev, text.inode, text.path) == (
        0x55D0C0A01000, 0x55D0C0A05000, "r-xp", 0x1000, "fd:01", 1234, "/usr/bin/app")
    assert text.executable and text.file_backed and text.file_key == ("fd:01", 1234)
    assert maps[2].path == "" and not maps[2].file_backed
    assert maps[4].path == "/tmp/my lib (deleted)" and maps[4].deleted
    assert maps[5].path == "[vdso]" and not maps[5].file_backed


def test_find_by_address() -> None:
    space = AddressSpace(parse_maps(MAPS))
    assert space.find(0x55D0C0A01000).path == "/usr/bin/app"
    assert space.find(0x55D0C0A04FFF).offset == 0x1000
    assert space.find(0x55D0C0A05000) is None
    assert space.find(0x7F1300000123).path.endswith("libc.so.6")
    assert space.find(0x10) is None


def test_merge_keeps_unmapped_libraries_and_prefers_new_mappings() -> None:
    old = AddressSpace(parse_maps(MAPS))
    lib = Mapping(0x7F1300000000, 0x7F1300100000, "r-xp", 0, "fd:01", 555, "/usr/lib/other.so")
    newer = AddressSpace([m for m in parse_maps(MAPS) if "libc" not in m.path and "my lib" not in m.path] + [lib])
    merged = old.merged_with(newer)
    assert merged.find(0x7F1300000010).path == "/usr/lib/other.so"  # remapped range: the new file wins
    assert merged.find(0x7F1400000010).path == "/tmp/my lib (deleted)"  # unmapped since: kept


def test_memory_reads_refuse_what_is_no_address() -> None:
    """A pointer read from a structure the target changed meanwhile can be anything: one at or above 2^63 is
    an unreadable address (MemoryError, as an unmapped one), not an OverflowError that ends the capture (it
    ended one in CI, reading a 3.13 thread's frames for their names)."""
    buf = ctypes.create_string_buffer(b"deepctx!")
    with ProcessMemory(os.getpid()) as mem:
        assert mem.read(ctypes.addressof(buf), 8) == b"deepctx!"
        for addr in (1 << 63, (1 << 64) - 8, -8):
            with pytest.raises(MemoryError, match="not an address"):
                mem.read_u64(addr)
            assert mem.read_up_to(addr, 8) == b""
        with pytest.raises(MemoryError):
            mem.read(8, 8)  # the zero page: unmapped


def test_process_info_of_this_process() -> None:
    info = process_info(os.getpid())
    assert info.pid == os.getpid() and info.uid == os.getuid()
    assert "pytest" in info.command or "python" in info.command
    assert not info.is_kernel_thread


def test_environ_value_reads_the_environment_at_exec() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={"DEEPCTX_A": "one=two", "DEEPCTX_AB": "x"})
    try:
        assert p.stdout is not None and p.stdout.readline() == b"up\n"  # exec done (its tables set up)
        assert environ_value(p.pid, "DEEPCTX_A") == "one=two"  # not DEEPCTX_AB's, split at the first =
        assert environ_value(p.pid, "DEEPCTX_B") is None
    finally:
        p.communicate(b"")
    assert environ_value(2**22 + 7, "PATH") is None  # no such process


def test_expected_agent_from_the_environment() -> None:
    def env(**values: str) -> Callable[[str], str | None]:
        return values.get

    assert expected_agent(env(CUDA_INJECTION64_PATH="/opt/x/libdeepctx_cupti.so")) == "/opt/x/libdeepctx_cupti.so"
    assert expected_agent(env(CUDA_INJECTION64_PATH="/opt/nsys/libToolsInjection64.so")) is None  # another tool's
    assert expected_agent(env(ROCP_TOOL_LIBRARIES="/a/libother.so:/b/libdeepctx_rocprof.so")) == "/b/libdeepctx_rocprof.so"
    assert expected_agent(env()) is None
