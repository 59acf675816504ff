"""Who may profile what, decided from the caller's kernel credentials: a user created for the test is
refused for root's process and allowed for its own; in the `deepctx` group it may profile any process.
It sees only its own stored windows, and cannot reach the gRPC server behind the relay."""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import store_producer as sp
from harness import DEEPCTX, Target

BURNER_ARGS = ("30",)


@pytest.fixture
def user() -> Iterator[pwd.struct_passwd]:
    name = f"dctx{os.getpid() % 100000}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


@pytest.fixture
def deepctx_group() -> Iterator[str]:
    created = False
    try:
        grp.getgrnam("deepctx")
    except KeyError:
        subprocess.run(["groupadd", "--system", "deepctx"], check=True)
        created = True
    yield "deepctx"
    if created:
        subprocess.run(["groupdel", "deepctx"], check=False)


def as_user(u: pwd.struct_passwd, *groups: int) -> list[str]:
    extra = ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
    return ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", *extra, "--"]


def cli_as(u: pwd.struct_passwd, daemon, *args: str, groups: tuple[int, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*as_user(u, *groups), *DEEPCTX, *args], env=dict(daemon.env(), HOME="/"),
                          capture_output=True, text=True, timeout=120)


def test_user_is_refused_for_roots_process_and_allowed_for_its_own(service_dir, stopped, user, native_targets,
                                                                   deepctx_group) -> None:
    now = time.time()
    service_dir.put(sp.windows(now - 600, 2, names=("h200_torch_ops",), uid=0)
                    + sp.windows(now - 600, 3, names=("h200_triton_kernel",), uid=user.pw_uid))
    d = service_dir.start()
    stopped.append(d)
    burner = str(native_targets / "cpu_burner")
    with Target([burner, *BURNER_ARGS]) as roots, Target([*as_user(user), burner, *BURNER_ARGS]) as own:
        r = cli_as(user, d, "attach", str(roots.pid), "--duration", "1", "--quiet")
        assert r.returncode == 1
        assert f"process {roots.pid} belongs to another user" in r.stderr
        r = cli_as(user, d, "stop", str(roots.pid))
        assert r.returncode == 1 and "belongs to another user" in r.stderr
        r = cli_as(user, d, "attach", str(own.pid), "--duration", "1", "--format", "json", "--quiet")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["pid"] == own.pid and doc["stats"]["cpu_samples"] > 0
        # in the deepctx group, root's process too
        gid = grp.getgrnam(deepctx_group).gr_gid
        r = cli_as(user, d, "attach", str(roots.pid), "--duration", "1", "--format", "json", "--quiet", groups=(gid,))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["pid"] == roots.pid
    # stored windows: only the user's own
    r = cli_as(user, d, "top", "--once", "--format", "json", "--since", "1h")
    assert r.returncode == 0, r.stderr
    assert [(p["pid"], p["windows"]) for p in json.loads(r.stdout)["processes"]] == [(1498, 3)]
    r = cli_as(user, d, "profile", "--pid", "604", "--since", "1h")
    assert r.returncode == 1 and "no stored windows match" in r.stderr
    # the gRPC socket behind the relay is out of reach
    private = service_dir.path / ".deepctxd.sock.d" / "grpc"
    assert private.exists()
    probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n"
             "except PermissionError:\n    print('refused')\nelse:\n    print('connected')\n")
    r = subprocess.run([*as_user(user), sys.executable, "-c", probe, str(private)], capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.strip() == "refused", r.stderr
