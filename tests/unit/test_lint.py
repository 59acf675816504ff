"""The code base stays ruff clean (settings in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ruff_clean() -> None:
    venv_ruff = Path(sys.executable).parent / "ruff"
    ruff = str(venv_ruff) if venv_ruff.exists() else shutil.which("ruff") or "ruff"
    r = subprocess.run([ruff, "check", "--no-cache", str(REPO)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
