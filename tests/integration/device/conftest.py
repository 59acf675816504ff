"""Device-activity tier (root, real eBPF, no GPU): the real CUPTI agent (native/) driven by the mock CUDA
driver, runtime and CUPTI of tests/mocks, built here against CUPTI's headers (skipped without them); and the
real rocprofiler-sdk agent driven by the mock HIP runtime and rocprofiler-sdk (built everywhere)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from device_paths import AGENT, MOCKS, REPO, ROCPROF_AGENT


@pytest.fixture(scope="session")
def built() -> tuple[Path, Path]:
    """(agent, mock library folder), built with make."""
    for folder in (REPO / "native", REPO / "tests" / "mocks"):
        subprocess.run(["make", "-s", "-C", str(folder), f"PYTHON={sys.executable}"], check=True)
    if not AGENT.exists() or not (MOCKS / "libcupti.so.13").exists():
        pytest.skip("CUPTI headers not found (pip install nvidia-cuda-cupti): agent and mocks not built")
    return AGENT, MOCKS


@pytest.fixture(scope="session")
def built_rocprof() -> tuple[Path, Path]:
    """(rocprofiler agent, mock library folder): built everywhere (no SDK or CUPTI headers needed)."""
    for folder in (REPO / "native", REPO / "tests" / "mocks"):
        subprocess.run(["make", "-s", "-C", str(folder), f"PYTHON={sys.executable}"], check=True)
    assert ROCPROF_AGENT.exists() and (MOCKS / "libamdhip64.so.6").exists()
    return ROCPROF_AGENT, MOCKS
