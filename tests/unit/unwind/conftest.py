"""Fixtures of the unwinder's unit tests: its C targets, built with gcc."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

TARGETS = Path(__file__).resolve().parents[2] / "targets" / "unwind"


@pytest.fixture(scope="session")
def unwind_targets(tmp_path_factory) -> Path:
    """tests/targets/unwind built with gcc into a temporary directory."""
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("gcc and make are needed to build the unwinder's C targets")
    out = tmp_path_factory.mktemp("unwind_targets")
    subprocess.run(["make", "-s", "-C", str(TARGETS), f"OUT={out}"], check=True)
    return out
