"""Unprivileged users for attack tests: made for the test, removed after it; commands run as them."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from harness import DEEPCTX, Daemon


@contextmanager
def made_user(tag: str = "") -> Iterator[pwd.struct_passwd]:
    """A fresh system user with its own group, no home and no login shell."""
    name = f"dcx{tag}{os.getpid() % 100000}"[:31]
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                   check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


def as_user(u: pwd.struct_passwd, *groups: int) -> list[str]:
    """The argv prefix that runs a command as u: real, effective and saved ids, no capabilities."""
    extra = ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
    return ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", *extra, "--"]


def cli_as(u: pwd.struct_passwd, daemon: Daemon, *args: str, groups: tuple[int, ...] = (),
           timeout: float = 120) -> subprocess.CompletedProcess:
    """`deepctx ARGS` as u, against daemon."""
    return subprocess.run([*as_user(u, *groups), *DEEPCTX, *args], env=dict(daemon.env(), HOME="/"),
                          capture_output=True, text=True, timeout=timeout)
