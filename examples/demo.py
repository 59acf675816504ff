"""The README's demo: start deepctxd, run the bundled example, attach to it, print the profile and the
analyzer's findings.

Run through `./install.sh demo` (as root). Uses a private socket so it never disturbs a running daemon.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def main() -> int:
    tmp = tempfile.mkdtemp(prefix="deepctx-demo-")
    sock = os.path.join(tmp, "deepctxd.sock")
    env = dict(os.environ, DEEPCTX_SOCKET=sock)
    daemon = subprocess.Popen([str(BIN / "deepctxd"), "--foreground", "--log-format", "text", "--log-level", "warning"],
                              env=env)
    workload = None
    try:
        subprocess.run([str(BIN / "deepctx"), "status", "--wait", "30"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        print(f"deepctxd is running (pid {daemon.pid}, socket {sock})", flush=True)
        workload = subprocess.Popen([sys.executable, str(HERE / "mini_train.py"), "60"], stdout=subprocess.PIPE, text=True)
        assert workload.stdout is not None
        ready = workload.stdout.readline().split()
        if not ready or ready[0] != "ready":
            print("the example workload did not start", file=sys.stderr)
            return 1
        pid = int(ready[1])
        print(f"profiling examples/mini_train.py (pid {pid}) for 5 s ...", flush=True)
        profile = os.path.join(tmp, "profile.json")
        rc = subprocess.run([str(BIN / "deepctx"), "attach", str(pid), "--duration", "5", "--format", "json",
                             "-o", profile], env=env).returncode
        if rc != 0:
            return rc
        # the report prints the tree, then the analyzer's findings (deepctx analyze FILE prints them alone)
        return subprocess.run([str(BIN / "deepctx"), "report", profile, "--min-percent", "2"], env=env).returncode
    finally:
        if workload is not None:
            workload.kill()
            workload.wait()
        daemon.terminate()
        daemon.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
