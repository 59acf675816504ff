"""Service tier: deepctxd as a service, with its window store, /metrics, relay and limits; real servers
(Prometheus, ClickHouse) on loopback started by the tests themselves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness import Daemon, stop_daemon
from service_env import ServiceDir


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a service test that takes up to a minute (runs in CI)")


@pytest.fixture
def service_dir() -> Iterator[ServiceDir]:
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
