"""Paths of the device-activity tier (imported by name: `conftest` is ambiguous across test folders)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
AGENT = REPO / "native" / "build" / "libdeepctx_cupti.so"
MOCKS = REPO / "tests" / "mocks" / "build" / "lib"
TARGET = Path(__file__).resolve().parent / "mock_target.py"
ROCPROF_AGENT = REPO / "native" / "build" / "libdeepctx_rocprof.so"


def make_agents_and_mocks() -> None:
    """Builds native/ (the agents) and tests/mocks/ with make; the CUPTI agent and its mocks only where
    CUPTI's headers are found. One build at a time: xdist's workers may ask at once."""
    for folder in (REPO / "native", REPO / "tests" / "mocks"):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # on the folder itself: no lock file left behind
            subprocess.run(["make", "-s", "-C", str(folder), f"PYTHON={sys.executable}"], check=True)
        finally:
            os.close(fd)


def cupti_mocks_built() -> bool:
    return AGENT.exists() and (MOCKS / "libcupti.so.13").exists()
