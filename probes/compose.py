"""Composes one BPF program from probe families and compiles it with bcc."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deepctx.probes.bcc_module import lean_modules
from deepctx.probes.family import PROBES_DIR, ProbeFamily
from deepctx.probes.program_cache import ProgramCache, cache_key, load_program

# bcc compiles with LLVM inside this process; one compilation at a time keeps that safe. Reentrant: a family's
# before_compile may compile a module of its own (probes/unwind_maps.py).
COMPILE_LOCK = threading.RLock()


def compose_source(families: Sequence[ProbeFamily]) -> str:
    """The program text: each family's include, in order (later families may call earlier helpers)."""
    parts = ["/* composed by deepctx: families " + ", ".join(f.name for f in families) + " */"]
    parts += [f.source() for f in families]
    return "\n".join(parts) + "\n"


def compose_cflags(families: Sequence[ProbeFamily]) -> list[str]:
    flags = [f"-I{PROBES_DIR}", "-Wno-macro-redefined"]
    for fam in families:
        for name, value in fam.defines().items():
            flags.append(f"-D{name}={value}")
    return flags


def render(families: Sequence[ProbeFamily]) -> str:
    """The final source as bcc sees it, with the settings: what `deepctxd --print-bpf` shows."""
    header = "\n".join(f"// cflag {f}" for f in compose_cflags(families))
    return header + "\n" + compose_source(families)


def compile_text(text: str, cflags: list[str]) -> Any:
    """A bcc program from C text (under the compile lock), its module made without bcc's rw engine where
    libbcc allows (probes/bcc_module.py: LLVM's state is freed once it is built)."""
    from bcc import BPF  # imported late: unit tests and the CLI never need bcc

    with COMPILE_LOCK, lean_modules():
        return BPF(text=text.encode(), cflags=cflags)  # bcc wants bytes


def compile_program(families: Sequence[ProbeFamily], cache: ProgramCache | None = None) -> Any:
    """The families' program, compiled; with a cache, loaded from it where an earlier daemon saved the same
    program (only its maps are compiled: probes/program_cache.py), and saved to it after a compile."""
    with COMPILE_LOCK:
        for fam in families:
            fam.before_compile()
        text, cflags = compose_source(families), compose_cflags(families)
        key = cache_key(text, cflags) if cache is not None else ""
        bpf = None
        if cache is not None and (code := cache.load(key)) is not None:
            bpf = load_program(key, text, cflags, code, compile_text)
        if bpf is None:
            bpf = compile_text(text, cflags)
            if cache is not None:
                cache.save(key, bpf)
        page_out_compiler()
        return bpf


COMPILER_FILES = re.compile(r"/lib(LLVM|clang-cpp)[^/]*\.so[^/]*$")
MADV_PAGEOUT = 21  # Linux 5.4+


def page_out_compiler(maps: str = "/proc/self/maps") -> int:
    """Hands the pages of LLVM's and clang's libraries back to the page cache once a program is compiled:
    a compile touches about 80 MB of them, which then count in deepctxd's resident memory until the next
    compile needs them again (and faults them back in from the page cache). MADV_PAGEOUT keeps every page's
    content (pages the loader relocated, which have no clean copy in the file, stay), so it is safe on code
    and data alike. Returns the bytes of the mappings advised (0 where the kernel has no MADV_PAGEOUT)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    advised = 0
    try:
        lines = Path(maps).read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not COMPILER_FILES.search(fields[5]):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if libc.madvise(start, end - start, MADV_PAGEOUT) != 0:
            return advised  # EINVAL: a kernel before 5.4; nothing else to try
        advised += end - start
    return advised


def cleanup_program(bpf: Any) -> None:
    with COMPILE_LOCK:
        bpf.cleanup()
