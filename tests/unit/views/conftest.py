"""Fixtures for view and export tests: the H200 profiles and synthetic ones with known contents."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # synth.py, shared with tests/views

from synth import SOURCE_TEXT, gpu_profile  # noqa: E402

from deepctx.cli.views.document import load  # noqa: E402

FIXTURES = HERE.parents[1] / "fixtures" / "profiles"


@pytest.fixture(scope="session")
def torch_doc() -> dict[str, Any]:
    return load(FIXTURES / "h200_torch_ops.json.xz")


@pytest.fixture(scope="session")
def jax_doc() -> dict[str, Any]:
    return load(FIXTURES / "h200_jax_jit.json.xz")


@pytest.fixture(scope="session")
def triton_doc() -> dict[str, Any]:
    return load(FIXTURES / "h200_triton_kernel.json.xz")


@pytest.fixture()
def source_file(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(SOURCE_TEXT)
    return p


@pytest.fixture()
def gpu_doc(source_file: Path) -> dict[str, Any]:
    return gpu_profile(str(source_file))
