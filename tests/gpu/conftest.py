"""GPU tier: needs root, BPF and an NVIDIA GPU (skipped elsewhere). Targets in tests/gpu/targets/."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Daemon, start_daemon, stop_daemon

TARGETS = Path(__file__).resolve().parent / "targets"


def has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    return subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if os.geteuid() != 0:
        reason = "needs root"
    elif not has_gpu():
        reason = "needs an NVIDIA GPU (nvidia-smi -L)"
    if reason:
        for item in items:
            if "gpu" in item.path.parts:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("gpu-daemon"))
    yield d
    assert stop_daemon(d) == 0, d.log.read_text()[-4000:]
