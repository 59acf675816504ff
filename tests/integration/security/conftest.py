"""Security tier: each test runs one attack from the security review as an unprivileged user against a
real deepctxd (root, real eBPF) and asserts it fails."""

from __future__ import annotations

import pwd
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Daemon, stop_daemon
from users import made_user

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))  # the service tier's ServiceDir
from service_env import ServiceDir  # noqa: E402


@pytest.fixture
def user() -> Iterator[pwd.struct_passwd]:
    with made_user() as u:
        yield u


@pytest.fixture
def other_user() -> Iterator[pwd.struct_passwd]:
    with made_user("b") as u:
        yield u


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
        assert stop_daemon(d) == 0, d.log.read_text()[-3000:]
