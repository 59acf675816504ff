"""The layers import downwards only: lint-imports checks the contracts in pyproject.toml ([tool.importlinter])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT), "--no-cache", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_contracts_kept() -> None:
    r = lint()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 5 kept, 0 broken." in r.stdout


def test_a_violation_breaks_a_contract(tmp_path: Path) -> None:
    """The checker sees the imports: a contract against one the daemon has (it drives the probes) breaks."""
    config = tmp_path / "violated.ini"
    config.write_text("[importlinter]\nroot_packages =\n    deepctx.probes\n    deepctx.daemon\n\n"
                      "[importlinter:contract:daemon-no-probes]\nname = daemon never imports probes\n"
                      "type = forbidden\nsource_modules = deepctx.daemon\nforbidden_modules = deepctx.probes\n")
    r = lint("--config", str(config))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "daemon never imports probes BROKEN" in r.stdout
    assert "deepctx.daemon.capture -> deepctx.probes" in r.stdout


def test_no_top_level_folder_shadows_the_standard_library() -> None:
    """Python started in the repository's root (python -m pytest, python -c) finds its top-level folders
    first: a folder named profile hid the standard library's profile module from cProfile (pytest-benchmark
    and torch import it), so the profile document's layer is profiles/."""
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert "profiles" in folders
    assert sorted(folders & set(sys.stdlib_module_names)) == []
