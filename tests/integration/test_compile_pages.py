"""probes/compose.page_out_compiler: after a compile, the pages of LLVM's and clang's libraries leave the
resident set (about 80 MB of deepctxd's), and compiling again still works."""

from __future__ import annotations

import re
from pathlib import Path

from deepctx.probes import compose

PROGRAM = b"BPF_ARRAY(counts, u64, 4); int probe(void *ctx) { int k = 0; counts.increment(k); return 0; }"


def compiler_private_clean_kb() -> int:
    """Resident kB of clean pages that only this process maps, in its mappings of the compiler's libraries
    (/proc/self/smaps). Pages another process maps as well (a deepctxd of another test that imported bcc)
    are shared, and the kernel leaves those be."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            fields = line.split(maxsplit=5)
            inside = len(fields) == 6 and bool(compose.COMPILER_FILES.search(fields[5]))
        elif inside and line.startswith("Private_Clean:"):
            total += int(line.split()[1])
    return total


def others_mapping_the_compiler() -> list[str]:
    """The other processes that map the compiler's libraries (their pages are then shared, not this one's)."""
    import os

    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if compose.COMPILER_FILES.search((proc / "maps").read_text()):
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{proc.name} {cmdline[:120]}")
        except OSError:
            continue
    return found


def test_the_compilers_pages_leave_memory_after_a_compile_and_come_back_for_the_next() -> None:
    from bcc import BPF

    first = BPF(text=PROGRAM)
    try:
        before = compiler_private_clean_kb()
        # a compile touches tens of MB of LLVM; another process mapping it (a daemon left running) shares them
        assert before > 10_000, (before, others_mapping_the_compiler())
        assert compose.page_out_compiler() > 0
        after = compiler_private_clean_kb()
        assert after < before / 2, (before, after)
        second = BPF(text=PROGRAM)  # the pages fault back in from the page cache
        second[b"counts"][0] = second[b"counts"].Leaf(7)
        assert second[b"counts"][0].value == 7
        second.cleanup()
    finally:
        first.cleanup()
