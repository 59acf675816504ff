"""DEEPCTX_SELF_MEMORY (daemon/self_memory.py): SIGUSR2 writes where the daemon's heap is, each allocation
charged to the innermost line of deepctx's code that asked for it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deepctx.daemon import self_memory

PACKAGE = Path(self_memory.__file__).resolve().parents[1]


def test_a_report_charges_numpy_and_bytes_to_the_line_of_ours_that_asked(tmp_path: Path) -> None:
    """A process made as deepctxd makes itself: the report lists a 24 MiB numpy array and a 12 MiB bytearray
    under the lines of a module in deepctx's folder that allocated them (through numpy's own code), with the
    process's resident memory above them; a second signal appends a second report."""
    helper = PACKAGE / "daemon" / f"_mem_probe_{os.getpid()}.py"  # inside the package: counted as ours
    helper.write_text(textwrap.dedent("""\
        import numpy as np
        def held():
            a = np.zeros(3 << 20, np.uint64)
            b = bytearray(12 << 20)
            return a, b
        """))
    out = tmp_path / "memory.txt"
    script = textwrap.dedent(f"""\
        import os, signal, sys
        from deepctx.daemon import self_memory
        assert self_memory.start_from_env() == {str(out)!r}
        from deepctx.daemon import _mem_probe_{os.getpid()} as probe
        keep = probe.held()
        os.kill(os.getpid(), signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGUSR2)
        print("ok")
        """)
    try:
        r = subprocess.run([sys.executable, "-c", script], env=os.environ | {self_memory.ENV: str(out)},
                           capture_output=True, text=True, timeout=60)
    finally:
        helper.unlink()
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    text = out.read_text()
    reports = text.split(self_memory.REPORT_END + "\n")
    assert len(reports) == 3 and reports[2] == ""  # two reports, each ended by its marker
    lines = reports[1].splitlines()
    assert lines[0].startswith("# report 2: pid ")
    assert lines[1].startswith("VmRSS ") and "RssAnon" in lines[1]
    assert lines[3].startswith("malloc: in use ") and lines[4].startswith("anonymous by mapping: [heap] ")
    rows = {line.split("  ")[-1]: float(line.split()[0]) for line in lines[3:] if " blocks  " in line}
    name = f"daemon/_mem_probe_{os.getpid()}.py"
    assert 24.0 <= rows[f"{name}:3"] < 24.5, rows
    assert 12.0 <= rows[f"{name}:4"] < 12.5, rows
    assert list(rows)[:2] == [f"{name}:3", f"{name}:4"]  # largest first


def test_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(self_memory.ENV, raising=False)
    assert self_memory.start_from_env() is None


def test_native_memory_shows_a_chunk_malloc_mapped_for_native_code() -> None:
    """48 MiB that C code holds (malloc, untraced by Python) count in malloc's mmapped total and as one
    unnamed mapping of 48 MiB resident once written; freed, they leave both."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    before = self_memory.malloc_mb()
    assert before is not None
    size = 48 << 20
    p = libc.malloc(size)
    try:
        ctypes.memset(p, 1, size)
        held = self_memory.malloc_mb()
        assert held is not None and held["mmapped"] - before["mmapped"] >= 48.0
        def holds_p(name: str) -> bool:  # an unnamed mapping is named by its address range
            bounds = re.fullmatch(r"([0-9a-f]+)-([0-9a-f]+)", name)
            return bounds is not None and int(bounds[1], 16) <= p < int(bounds[2], 16)

        big = [m for m in self_memory.anonymous_mappings() if holds_p(m[0])]
        assert len(big) == 1 and big[0][1] >= 48.0 and big[0][2] >= 48.0, self_memory.anonymous_mappings()[:3]
        lines = self_memory.native_lines()
        assert lines[0].startswith("malloc: in use ") and any(big[0][0] in line for line in lines[2:])
    finally:
        libc.free(p)
    after = self_memory.malloc_mb()
    assert after is not None and after["mmapped"] < held["mmapped"] - 47.9
