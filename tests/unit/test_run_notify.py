"""`deepctx run` profiles only a process of its command that names itself (cli/commands/run.py refusal)."""

from __future__ import annotations

import os
import subprocess
import sys

from deepctx.cli.commands.run import refusal


def test_only_the_commands_own_processes_pass() -> None:
    cmd = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen([sys.executable, "
                            "'-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE); print(p.pid, flush=True); "
                            "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert cmd.stdout is not None
        grandchild = int(cmd.stdout.readline())
        assert refusal(cmd.pid, cmd.pid, cmd.pid) is None
        assert refusal(grandchild, grandchild, cmd.pid) is None  # a descendant
        assert refusal(grandchild, None, cmd.pid) is None  # no kernel sender: the walk alone
        assert refusal(os.getpid(), os.getpid(), cmd.pid) == f"process {os.getpid()} is not a process of the command"
        assert refusal(1, None, cmd.pid) == "process 1 is not a process of the command"
        assert refusal(os.getpid(), grandchild, cmd.pid) == f"process {grandchild} sent pid {os.getpid()}, not its own"
    finally:
        cmd.kill()
        cmd.wait()
    assert refusal(cmd.pid, cmd.pid, cmd.pid) == f"process {cmd.pid} does not exist"
