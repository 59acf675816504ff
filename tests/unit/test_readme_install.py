"""README's list of what install.sh installs names every Debian package in install.sh's list."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def install_packages() -> list[str]:
    text = (REPO / "install.sh").read_text()
    m = re.search(r"^packages=\((.*?)\)", text, re.S | re.M)
    assert m, "install.sh has no packages=(...) list"
    return m.group(1).split()


def test_readme_names_every_installed_package() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("`install.sh` installs what it needs itself:", 1)[1].split("\n## ", 1)[0]
    packages = install_packages()
    assert "clickhouse-server" in packages and "python3-bpfcc" in packages
    missing = [p for p in packages if f"`{p}`" not in section]
    assert missing == []


def test_readme_names_every_folder_install_sh_builds() -> None:
    """install.sh runs make in native/ and tests/mocks/: the README says what each builds."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("`install.sh` installs what it needs itself:", 1)[1].split("\n## ", 1)[0]
    folders = re.findall(r"make -s -C (\S+)", (REPO / "install.sh").read_text())
    assert folders == ["native", "tests/mocks"]
    assert [f for f in folders if f"`{f}/`" not in section] == []
    # native/'s Makefile builds both agents; tests/mocks' every mock runtime and SDK
    for what in ("CUPTI agent", "rocprofiler-sdk agent", "CUDA", "NVML", "HIP"):
        assert what in section, what
