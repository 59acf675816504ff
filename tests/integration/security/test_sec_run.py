"""`deepctx run` trusts only its command's own processes (issue #29, finding 11): a workload that root runs
names, over DEEPCTX_NOTIFY_FD, an unrelated root process; the runner does not ask the daemon to profile or
inject into it, tells the workload to go on, and warns."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from harness import DEEPCTX, Daemon, Target, stop_daemon
from service_env import ServiceDir
from users import as_user

# What the agent does at cuInit (native/agent_common.c), with another process's pid in the message.
WORKLOAD = """
import array, os, socket, sys
fd = int(os.environ["DEEPCTX_NOTIFY_FD"])
mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
notify = socket.socket(fileno=fd)
notify.sendmsg([int(sys.argv[1]).to_bytes(4, "little")],
               [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno()]))])
theirs.close()
mine.settimeout(60)
print("reply", mine.recv(1).decode() or "-", flush=True)
"""
SLEEPER = "import os, sys; print('ready', os.getpid(), flush=True); sys.stdin.readline()"


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    sd = ServiceDir()
    d = sd.start()
    yield d
    assert stop_daemon(d) == 0, d.log.read_text()[-3000:]
    sd.remove()


def test_run_ignores_a_pid_that_is_not_the_commands(daemon, user) -> None:
    with Target([sys.executable, "-c", SLEEPER], stdin=subprocess.PIPE) as victim:
        r = subprocess.run([*DEEPCTX, "run", "--agent", "/bin/true", "--duration", "5", "--",
                            *as_user(user), sys.executable, "-c", WORKLOAD, str(victim.pid)],
                           env=daemon.env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "reply s" in r.stdout  # told to go on, at once, without a capture
        assert "profiling it" not in r.stderr
        assert f"sent pid {victim.pid}, not its own: ignored" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 2  # the warning, and "never initialized CUDA"
        assert "capture started" not in daemon.log.read_text()
