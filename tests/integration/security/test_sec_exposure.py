"""What a caller gets to see (issue #29, findings 9, 10 and /metrics of 13): a user's `deepctx ps` and
`deepctx status` show what /proc would show that user, never what the daemon learnt from another user's
maps or memory; hidepid=invisible hides processes; root's terminal gets another user's command line
escaped; /metrics carries no command line arguments."""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
import urllib.request
from pathlib import Path

from harness import DEEPCTX, DEEPCTXD, Daemon, Target, cuda_runtime, wait_for
from service_env import ServiceDir, free_port
from users import as_user, cli_as

SECRET = "--token=s3cr3t-f00d-7a6e"
EVIL = "\x1b]0;pwned\x07\x1b[2J"
# a Python process that loads the CUDA runtime when given its path, and holds on
HOLD = """
import ctypes, os, sys
held = ctypes.CDLL(sys.argv[1]) if sys.argv[1] != "-" else None
print("ready", os.getpid(), flush=True)
sys.stdin.readline()
"""


def holder(*prefix: str, lib: str = "-", arg: str = "") -> Target:
    return Target([*prefix, sys.executable, "-c", HOLD, lib, *([arg] if arg else [])], stdin=subprocess.PIPE)


def ps(u: pwd.struct_passwd | None, d: Daemon, *args: str) -> dict[int, dict]:
    r = cli_as(u, d, "ps", "--format", "json", *args) if u else d.cli("ps", "--format", "json", *args)
    assert r.returncode == 0, r.stderr
    return {p["pid"]: p for p in json.loads(r.stdout)}


def test_a_user_sees_what_proc_shows_it(service_dir, stopped, user, other_user) -> None:
    d = service_dir.start()
    stopped.append(d)
    lib = cuda_runtime()
    with holder(arg=SECRET) as roots, holder(*as_user(other_user), lib=lib) as others, \
            holder(*as_user(user), lib=lib) as own:
        # root sees everything, as before
        everything = ps(None, d)
        assert everything[roots.pid]["python"] and SECRET in everything[roots.pid]["command"]
        assert everything[others.pid]["gpu_libraries"] == [Path(lib).name]
        # the user: its own process in full; root's (a Python process only to whoever reads its maps) and the
        # other user's are not Python or GPU processes to it
        mine = ps(user, d)
        assert mine[own.pid]["python"] == everything[own.pid]["python"] != ""
        assert mine[own.pid]["gpu_libraries"] == [Path(lib).name]
        assert roots.pid not in mine and others.pid not in mine
        # --all: listed (/proc/PID/cmdline is readable by all without hidepid), nothing from maps or memory
        listed = ps(user, d, "--all")
        assert listed[others.pid]["python"] is None and listed[others.pid]["gpu_libraries"] == []
        assert listed[roots.pid]["python"] is None and listed[roots.pid]["gpu_libraries"] == []

        # Status: root's capture of the other user's process is not shown to the user, only counted
        cap = subprocess.Popen([*DEEPCTX, "attach", str(others.pid), "--duration", "60", "--format", "json",
                                "--quiet"], env=d.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def sessions(u: pwd.struct_passwd | None) -> dict:
                r = cli_as(u, d, "status", "--format", "json") if u else d.cli("status", "--format", "json")
                assert r.returncode == 0, r.stderr
                return json.loads(r.stdout)

            wait_for(lambda: any(s["pid"] == others.pid for s in sessions(None)["sessions"]), 60,
                     "root's capture to run")
            seen = sessions(user)
            assert seen["sessions"] == [] and seen["totals"]["sessions_of_others"] == "1"
        finally:
            assert d.cli("stop", str(others.pid)).returncode == 0
            cap.wait(timeout=60)


def test_metrics_carry_no_command_line_arguments(service_dir, stopped) -> None:
    port = free_port()
    d = service_dir.start(metrics_address=f"127.0.0.1:{port}")
    stopped.append(d)
    with holder(arg=SECRET) as roots:
        # root's capture is counted under the process's executable name, without its arguments
        assert d.cli("attach", str(roots.pid), "--duration", "1", "--quiet", "--format", "json").returncode == 0

        def scrape() -> str | None:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            return text if f'pid="{roots.pid}"' in text else None

        text = wait_for(scrape, 30, "the capture's series on /metrics")
        assert "s3cr3t" not in text
        labels = [ln for ln in text.splitlines() if ln.startswith("deepctx_process_cpu_samples_total{")
                  and f'pid="{roots.pid}"' in ln]
        assert len(labels) == 1 and f'command="{Path(sys.executable).name}"' in labels[0]


def test_another_users_escape_sequences_reach_roots_terminal_escaped(service_dir, stopped, user) -> None:
    d = service_dir.start()
    stopped.append(d)
    with holder(*as_user(user), arg=EVIL) as evil:
        r = subprocess.run([*DEEPCTX, "ps"], env=dict(d.env(), COLUMNS="1000"), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        line = next(ln for ln in r.stdout.splitlines() if ln.lstrip().startswith(str(evil.pid)))
        assert "\\x1b]0;pwned\\x07\\x1b[2J" in line
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout
        # JSON is data: the raw string, as the process has it
        assert EVIL in ps(None, d)[evil.pid]["command"]


def start_hidepid_daemon(sd: ServiceDir) -> Daemon:
    """deepctxd in a mount namespace of its own whose /proc is a new instance mounted hidepid=invisible (one
    instance per mount since Linux 5.8: the host's /proc keeps its options)."""
    sock, log = str(sd.path / "deepctxd.sock"), sd.path / "deepctxd.log"
    inner = 'mount -t proc -o hidepid=invisible proc /proc && exec "$@"'
    with open(log, "w") as out:
        proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", inner, "sh",
                                 *DEEPCTXD, "--foreground", "--socket", sock, "--log-format", "json", "--config",
                                 str(sd.config())], stdout=out, stderr=subprocess.STDOUT)
    d = Daemon(proc, sock, log)
    r = d.cli("status", "--wait", "60")
    assert r.returncode == 0, f"deepctxd did not come up: {r.stderr}\n{log.read_text()}"
    return d


def test_hidepid_hides_other_users_processes_from_a_user(service_dir, stopped, user, other_user) -> None:
    d = start_hidepid_daemon(service_dir)
    stopped.append(d)
    assert "hidepid" not in Path("/proc/self/mountinfo").read_text()  # the host's /proc is untouched
    with holder(arg=SECRET) as roots, holder(*as_user(other_user)) as others, holder(*as_user(user)) as own:
        listed = ps(user, d, "--all")
        assert own.pid in listed and listed[own.pid]["python"]
        assert roots.pid not in listed and others.pid not in listed
        assert not any(SECRET in p["command"] for p in listed.values())
        everything = ps(None, d, "--all")  # root is not bound by hidepid
        assert {roots.pid, others.pid, own.pid} <= set(everything)
