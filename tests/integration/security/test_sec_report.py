"""The HTML report embeds files the profiled process names (issue #29, finding 12): root reporting on a
user's process embeds only what that user could read, never a special file, and writes the report 0600."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import DEEPCTX, Daemon, Target, stop_daemon
from service_env import ServiceDir
from users import as_user

# Functions whose code objects name the files given (co_filename), called in a loop.
BURN = """
import sys
fns = []
for k, name in enumerate(sys.argv[1:]):
    g = {}
    exec(compile(f"def hot{k}():\\n    x = 0\\n    for i in range(20000):\\n        x += i\\n    return x\\n", name, "exec"), g)
    fns.append(g[f"hot{k}"])
print("ready", __import__("os").getpid(), flush=True)
while True:
    for f in fns:
        f()
"""


@pytest.fixture
def daemon(service_dir: ServiceDir) -> Iterator[Daemon]:
    d = service_dir.start()
    yield d
    assert stop_daemon(d) == 0, d.log.read_text()[-3000:]


def test_root_reports_on_a_users_process_without_roots_files(daemon, user, tmp_path) -> None:
    files = Path(tempfile.mkdtemp(prefix="deepctx-src-", dir="/tmp"))
    try:
        os.chmod(files, 0o755)
        secret = files / "secret.py"  # root's, 0600
        secret.write_text("ROOT_ONLY_SECRET = 'k3y-0600'\n")
        secret.chmod(0o600)
        private = files / "private"  # root's 0700 folder, a 0644 file in it
        private.mkdir(mode=0o700)
        hidden = private / "settings.py"
        hidden.write_text("ROOT_DIR_SECRET = 'k3y-dir'\n")
        hidden.chmod(0o644)
        own = files / "own.py"  # the user's own source, 0600: still embedded
        own.write_text("OWN_SOURCE_MARK = 1\n")
        own.chmod(0o600)
        os.chown(own, user.pw_uid, user.pw_gid)
        fifo = files / "fifo.py"
        os.mkfifo(fifo, 0o666)
        names = [str(secret), str(hidden), str(own), str(fifo)]
        with Target([*as_user(user), sys.executable, "-c", BURN, *names]) as t:
            out = tmp_path / "report.html"
            # a bounded run: a FIFO that the report opened for reading would block it for good
            r = subprocess.run([*DEEPCTX, "report", "--pid", str(t.pid), "--duration", "3", "--html", str(out)],
                               env=daemon.env(), capture_output=True, text=True, timeout=180)
            assert r.returncode == 0, r.stderr
        html = out.read_text()
        assert all(n in html for n in names), "the functions of every file were not profiled"
        assert "k3y-0600" not in html and "k3y-dir" not in html
        assert "OWN_SOURCE_MARK" in html
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        # asked otherwise, the mode asked for (and an existing file takes it too)
        saved = tmp_path / "saved.json"
        r = subprocess.run([*DEEPCTX, "attach", str(os.getpid()), "--duration", "1", "--quiet", "-o", str(saved)],
                           env=daemon.env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        r = subprocess.run([*DEEPCTX, "report", str(saved), "--html", str(out), "--mode", "0644"],
                           env=daemon.env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
    finally:
        subprocess.run(["rm", "-rf", str(files)], check=False)


def test_the_daemon_reads_a_targets_source_as_its_owner(user) -> None:
    """3.10 targets' qualified names come from the file co_filename names (host/python/code.py): read with
    the target owner's rights, a root-only file named by a user's process stays unread."""
    from deepctx.host.target_files import read_target_file

    folder = Path(tempfile.mkdtemp(prefix="deepctx-src-", dir="/tmp"))
    os.chmod(folder, 0o755)
    secret = folder / "secret.py"
    secret.write_text("def f():\n    pass\n")
    secret.chmod(0o600)
    with Target([*as_user(user), sys.executable, "-c", "import os; print('ready', os.getpid(), flush=True); "
                 "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE) as t:
        assert read_target_file(t.pid, str(secret)) is None
        secret.chmod(0o644)
        assert read_target_file(t.pid, str(secret)) == secret.read_bytes()
    subprocess.run(["rm", "-rf", str(folder)], check=False)
