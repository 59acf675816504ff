"""Analyzer tests: the H200 fixtures and the synthetic document builder (analyzer_docs.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from deepctx.cli.views.document import load  # noqa: E402

FIXTURES = HERE.parents[1] / "fixtures" / "profiles"


@pytest.fixture(scope="session")
def torch_ops() -> dict[str, Any]:
    return load(FIXTURES / "h200_torch_ops.json.xz")


@pytest.fixture(scope="session")
def triton_kernel() -> dict[str, Any]:
    return load(FIXTURES / "h200_triton_kernel.json.xz")


@pytest.fixture(scope="session")
def jax_jit() -> dict[str, Any]:
    return load(FIXTURES / "h200_jax_jit.json.xz")
