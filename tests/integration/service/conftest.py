"""Service tier: deepctxd as a service, with its window store, /metrics, relay and limits; real servers
(Prometheus, ClickHouse) on loopback started by the tests themselves."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a service test that takes up to a minute (runs in CI)")
