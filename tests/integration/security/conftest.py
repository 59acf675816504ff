"""Security tier: each test runs one attack from the security review as an unprivileged user against a
real deepctxd (root, real eBPF) and asserts it fails."""

from __future__ import annotations

import pwd
from collections.abc import Iterator

import pytest
from users import made_user


@pytest.fixture
def user() -> Iterator[pwd.struct_passwd]:
    with made_user() as u:
        yield u


@pytest.fixture
def other_user() -> Iterator[pwd.struct_passwd]:
    with made_user("b") as u:
        yield u
