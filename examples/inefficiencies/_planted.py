"""The planted kernels of the PC-sampling rules (kernels/planted.cu), built with make on first use: each
example calls planted_<rule>(fixed, steps) from its marked line."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

KERNELS = Path(__file__).resolve().parent / "kernels"
LIB = KERNELS / "build" / "libplanted.so"


def planted() -> ctypes.CDLL:
    if not LIB.exists():  # CUDA_HOME and ARCH as the environment says (kernels/Makefile)
        subprocess.run(["make", "-s", "-C", str(KERNELS)], check=True, env=dict(os.environ))
    lib = ctypes.CDLL(str(LIB))
    for fn in ("planted_long_scoreboard", "planted_uncoalesced_access", "planted_bank_conflicts",
               "planted_warp_divergence", "planted_fp32_fma", "planted_low_occupancy"):
        getattr(lib, fn).argtypes = [ctypes.c_int, ctypes.c_int]
    return lib


def check(rc: int) -> None:
    if rc != 0:
        raise SystemExit(f"a planted kernel failed: CUDA error {rc}")
