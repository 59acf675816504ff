"""Integration tier: a real deepctxd on a private socket, real targets, real eBPF (root)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# Re-exported: tests written before harness.py existed import these from conftest.
from harness import Daemon, Target, start_daemon, stop_daemon, wait_for  # noqa: F401
from service_env import ServiceDir


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("daemon"))
    yield d
    rc = stop_daemon(d)
    assert rc == 0, f"deepctxd exited with {rc} on SIGTERM:\n{d.log.read_text()[-4000:]}"


@pytest.fixture
def service_dir() -> Iterator[ServiceDir]:
    """A daemon folder every user may enter (its socket's), removed after the test."""
    d = ServiceDir()
    yield d
    d.remove()


@pytest.fixture
def stopped() -> Iterator[list[Daemon]]:
    """Daemons a test started: stopped (SIGTERM, exit status 0 asserted) at its end."""
    started: list[Daemon] = []
    yield started
    for d in started:
        rc = stop_daemon(d)
        assert rc == 0, f"deepctxd exited with {rc}:\n{d.log.read_text()[-3000:]}"
