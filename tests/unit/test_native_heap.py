"""daemon/native_heap.py: glibc's mmap threshold stays fixed, so a block freed after a large one still goes
back to the system (measured on the H200: 146 MB of freed memory kept by malloc with one capture)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""\
    import ctypes, sys
    from deepctx.daemon import native_heap, self_memory
    if sys.argv[1] == "tuned":
        native_heap.tune()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(20 << 20))  # a mapped block freed: glibc raises its threshold to 20 MiB
    before = self_memory.malloc_mb()["mmapped"]
    p = libc.malloc(1 << 20)
    print(round(self_memory.malloc_mb()["mmapped"] - before, 3))
    libc.free(p)
    """)


def mapped_after(mode: str) -> float:
    r = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return float(r.stdout)


def test_a_megabyte_block_is_mapped_of_its_own_after_a_larger_one_was_freed() -> None:
    assert mapped_after("tuned") >= 1.0  # its own mapping: unmapped when freed
    assert mapped_after("default") == 0.0  # glibc's default: from the arena, kept there once freed
