"""Device-activity tier (root, real eBPF, no GPU): the real CUPTI agent (native/) driven by the mock CUDA
driver, runtime and CUPTI of tests/mocks, built here against CUPTI's headers (skipped without them); and the
real rocprofiler-sdk agent driven by the mock HIP runtime and rocprofiler-sdk (built everywhere)."""

from __future__ import annotations

from pathlib import Path

import pytest
from device_paths import AGENT, MOCKS, ROCPROF_AGENT, cupti_mocks_built, make_agents_and_mocks


@pytest.fixture(scope="session")
def built() -> tuple[Path, Path]:
    """(agent, mock library folder), built with make."""
    make_agents_and_mocks()
    if not cupti_mocks_built():
        pytest.skip("CUPTI headers not found (pip install nvidia-cuda-cupti): agent and mocks not built")
    return AGENT, MOCKS


@pytest.fixture(scope="session")
def built_rocprof() -> tuple[Path, Path]:
    """(rocprofiler agent, mock library folder): built everywhere (no SDK or CUPTI headers needed)."""
    make_agents_and_mocks()
    assert ROCPROF_AGENT.exists() and (MOCKS / "libamdhip64.so.6").exists()
    return ROCPROF_AGENT, MOCKS
