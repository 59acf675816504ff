"""Fixtures for tests against real consumers (Chromium, hatchet, HTA, Go's pprof); each skips cleanly when
its tool is missing. Screenshots go to pytest's tmp dir and, when DEEPCTX_ARTIFACTS is set, are copied there."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "unit" / "views"))  # synth.py

from synth import SOURCE_TEXT, gpu_profile  # noqa: E402

from deepctx.cli.views.document import load  # noqa: E402

FIXTURES = HERE.parent / "fixtures" / "profiles"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (never `playwright install`). Playwright gives every launch a
    fresh temporary profile directory, so no --user-data-dir is passed."""
    sync_api = pytest.importorskip("playwright.sync_api")
    exe = chromium_path()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture()
def shots(tmp_path: Path) -> Any:
    """shots(page, name): a PNG under tmp_path/screenshots, copied to $DEEPCTX_ARTIFACTS when set."""
    out = tmp_path / "screenshots"
    out.mkdir()

    def take(page: Any, name: str) -> Path:
        path = out / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 5000
        dest = os.environ.get("DEEPCTX_ARTIFACTS")
        if dest:
            Path(dest).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(dest) / path.name)
        return path

    return take


@pytest.fixture()
def source_file(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(SOURCE_TEXT)
    return p


@pytest.fixture()
def gpu_doc(source_file: Path) -> dict[str, Any]:
    return gpu_profile(str(source_file))


@pytest.fixture(scope="session")
def torch_doc() -> dict[str, Any]:
    return load(FIXTURES / "h200_torch_ops.json.xz")


@pytest.fixture(scope="session")
def jax_doc() -> dict[str, Any]:
    return load(FIXTURES / "h200_jax_jit.json.xz")
