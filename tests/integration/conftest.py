"""Integration tier: a real deepctxd on a private socket, real targets, real eBPF (root)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# Re-exported: tests written before harness.py existed import these from conftest.
from harness import Daemon, Target, start_daemon, stop_daemon, wait_for  # noqa: F401


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = start_daemon(tmp_path_factory.mktemp("daemon"))
    yield d
    rc = stop_daemon(d)
    assert rc == 0, f"deepctxd exited with {rc} on SIGTERM:\n{d.log.read_text()[-4000:]}"
