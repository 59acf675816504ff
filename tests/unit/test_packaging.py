"""pyproject.toml's package list and package data hold every folder and file the installed deepctx needs
(#34.4): a folder setuptools finds data in but no package names makes it warn (as deepctx.cli.html once
did), and a file no package-data pattern matches is missing from a non-editable install."""

from __future__ import annotations

import fnmatch
import subprocess
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def tracked() -> dict[str, list[str]]:
    """Each tracked file of the package folders, by the package that holds it (deepctx.cli.html: its files)."""
    out: dict[str, list[str]] = {}
    for package, folder in SETUPTOOLS["package-dir"].items():
        files = subprocess.run(["git", "ls-files", folder], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.split()
        for f in files:
            rel = Path(f).relative_to(folder)
            name = ".".join([package, *rel.parent.parts])
            out.setdefault(name, []).append(rel.name)
    return out


def test_every_folder_with_files_is_a_listed_package() -> None:
    found = tracked()
    assert {"deepctx.cli.html", "deepctx.cli.html.vendor", "deepctx.probes"} <= set(found)
    assert sorted(set(found) - set(SETUPTOOLS["packages"])) == []


def matched(package: str, name: str) -> bool:
    """Whether a package-data pattern of the package, or of one above it, matches the file: patterns are
    paths below their own package's folder ('v1/*.proto' under deepctx.proto)."""
    for owner, patterns in SETUPTOOLS["package-data"].items():
        if package == owner or package.startswith(owner + "."):
            below = package[len(owner):].lstrip(".").replace(".", "/")
            path = f"{below}/{name}" if below else name
            if any(fnmatch.fnmatch(path, p) for p in patterns):
                return True
    return False


def test_every_file_that_is_not_code_is_package_data() -> None:
    left = [f"{package}: {name}" for package, names in tracked().items() for name in names
            if not name.endswith((".py", ".pyi")) and not matched(package, name)]
    assert left == []
    assert matched("deepctx.proto.v1", "deepctx.proto") and not matched("deepctx.cli", "report.html")
