"""The structs shared by BPF programs and Python: the C header is the truth, the ctypes mirror must match."""

from __future__ import annotations

import ctypes as ct
import subprocess
from pathlib import Path

from deepctx.probes import cpu_sampler
from deepctx.probes.family import PROBES_DIR


def c_layout(tmp: Path, header: str, exprs: list[str]) -> list[int]:
    """Values of C expressions (sizeof, offsetof, constants) as gcc computes them with the header."""
    prints = "\n".join(f'    printf("%lld\\n", (long long)({e}));' for e in exprs)
    src = tmp / "layout.c"
    src.write_text(f'#include <stdio.h>\n#include <stddef.h>\n#include "{header}"\nint main(void) {{\n{prints}\n    return 0;\n}}\n')
    exe = tmp / "layout"
    subprocess.run(["gcc", f"-I{PROBES_DIR}", "-o", str(exe), str(src)], check=True)
    return [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]


def struct_exprs(c_name: str, mirror: type[ct.Structure]) -> tuple[list[str], list[int]]:
    exprs = [f"sizeof(struct {c_name})"]
    want = [ct.sizeof(mirror)]
    for field, *_ in mirror._fields_:
        exprs.append(f"offsetof(struct {c_name}, {field})")
        want.append(getattr(mirror, field).offset)
    return exprs, want


def test_sample_key_matches_header(tmp_path: Path) -> None:
    exprs, want = struct_exprs("sample_key", cpu_sampler.SampleKey)
    assert c_layout(tmp_path, "cpu_sampler.h", exprs) == want


def test_sampler_constants_match_header(tmp_path: Path) -> None:
    names = ["SAMPLE_F_USER_STACK_LOST", "SAMPLE_F_KERNEL_MODE", "SAMPLE_F_PY_SHIFT", "SAMPLE_F_NATIVE_SHIFT",
             "CPU_STAT_SAMPLES", "CPU_STAT_USER_STACK_LOST", "CPU_STAT_KERNEL_STACK_LOST", "CPU_STAT_COUNTS_FULL",
             "CPU_STAT__COUNT"]
    assert c_layout(tmp_path, "cpu_sampler.h", names) == [getattr(cpu_sampler, n) for n in names]
    assert set(cpu_sampler.STAT_NAMES) == set(range(cpu_sampler.CPU_STAT__COUNT))
