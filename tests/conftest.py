"""Shared fixtures: built native targets, tiers that skip cleanly where their needs are missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TARGETS = TESTS / "targets"
REPO = TESTS.parent


def is_root() -> bool:
    return os.geteuid() == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_root = pytest.mark.skip(reason="needs root and a kernel with BPF (integration tier)")
    for item in items:
        if "integration" in item.path.parts and not is_root():
            item.add_marker(skip_root)


@pytest.fixture(scope="session")
def native_targets() -> Path:
    """tests/targets/bin, built with make (frame pointers on, debug info kept)."""
    subprocess.run(["make", "-s", "-C", str(TARGETS)], check=True)
    return TARGETS / "bin"
