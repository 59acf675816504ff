"""Paths of the device-activity tier (imported by name: `conftest` is ambiguous across test folders)."""

from __future__ import annotations

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
    CUPTI's headers are found."""
    for folder in (REPO / "native", REPO / "tests" / "mocks"):
        subprocess.run(["make", "-s", "-C", str(folder), f"PYTHON={sys.executable}"], check=True)


def cupti_mocks_built() -> bool:
    return AGENT.exists() and (MOCKS / "libcupti.so.13").exists()
