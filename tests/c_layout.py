"""What gcc makes of a C header: sizes, offsets and constants, for tests that hold the Python side's ctypes
mirrors and constants against the header that BPF programs (or an interpreter) are built with."""

from __future__ import annotations

import ctypes as ct
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from deepctx.probes.family import PROBES_DIR


def c_values(
    tmp: Path, headers: Sequence[str], exprs: Sequence[str], *,
    include_dirs: Sequence[Path] = (PROBES_DIR,), defines: Mapping[str, object] | None = None,
) -> list[int]:
    """Values of C expressions (sizeof, offsetof, constants) as gcc computes them, in order: one program that
    includes `headers` (each as written after #include: '"x.h"' or '<x.h>', first, in order), then <stdio.h>
    and <stddef.h>, built with -Wall -Werror, the -I directories and the -D defines, and run."""
    includes = "".join(f"#include {h}\n" for h in [*headers, "<stdio.h>", "<stddef.h>"])
    prints = "".join(f'    printf("%lld\\n", (long long)({e}));\n' for e in exprs)
    src = tmp / "layout.c"
    src.write_text(f"{includes}int main(void) {{\n{prints}    return 0;\n}}\n")
    exe = tmp / "layout"
    flags = [*(f"-I{d}" for d in include_dirs), *(f"-D{k}={v}" for k, v in (defines or {}).items())]
    subprocess.run(["gcc", "-Wall", "-Werror", *flags, "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return [int(x) for x in out.split()]


def struct_layout(c_name: str, mirror: type[ct.Structure]) -> dict[str, int]:
    """C expression -> the ctypes mirror's value: sizeof(struct c_name), and the offsetof of every field."""
    want = {f"sizeof(struct {c_name})": ct.sizeof(mirror)}
    for field, *_ in mirror._fields_:
        want[f"offsetof(struct {c_name}, {field})"] = getattr(mirror, field).offset
    return want
