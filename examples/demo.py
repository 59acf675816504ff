"""The README's demo: start deepctxd, profile the bundled example with its GPU work, print the profile (kernels
under their Python lines, device times) and the analyzer's findings, and write a trace and an HTML report.

Run through `./install.sh demo` (as root). With a GPU (nvidia-smi works) and PyTorch it profiles
examples/inefficiencies/launch_bound_loop.py on that GPU; without one it profiles examples/simulated_train.py
on the mock CUDA runtime and mock CUPTI of tests/mocks, and says so: the device is simulated, deepctx's
agent, probes and analyzer are the real ones. A private socket keeps it off any running daemon; its
scratch folder is removed at the end, and what it writes goes to demo-output/ in this checkout.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BIN = Path(sys.executable).parent
MOCKS = ROOT / "tests" / "mocks" / "build" / "lib"
AGENT = ROOT / "native" / "build" / "libdeepctx_cupti.so"
# DEEPCTX_DEMO_OUT: another folder (tests/integration/device/test_demo.py keeps the checkout's as it is)
OUT = Path(os.environ.get("DEEPCTX_DEMO_OUT") or ROOT / "demo-output")


def tool(name: str, module: str) -> list[str]:
    """The installed console script, or the module run by this interpreter (a GPU host with the tree on
    PYTHONPATH and no install)."""
    script = BIN / name
    return [str(script)] if script.exists() else [sys.executable, "-m", module]


DEEPCTX, DEEPCTXD = tool("deepctx", "deepctx.cli.main"), tool("deepctxd", "deepctx.daemon.main")


def real_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def workload() -> tuple[list[str], dict[str, str], str, tuple[str, str]]:
    """(command, its extra environment, what to call it, its last argument for the profile's run and for the
    trace's shorter one)."""
    if real_gpu() and importlib.util.find_spec("torch") is not None:
        return ([sys.executable, str(HERE / "inefficiencies" / "launch_bound_loop.py"), "--once", "--steps"], {},
                "examples/inefficiencies/launch_bound_loop.py on this machine's GPU", ("500", "50"))
    if not (MOCKS / "libcudart.so.13").exists() or not AGENT.exists():
        raise SystemExit("deepctx demo: the mock CUDA libraries or the CUPTI agent are not built "
                         "(CUPTI's headers were not found: pip install nvidia-cuda-cupti, then ./install.sh demo)")
    banner = ("SIMULATED GPU: no GPU here (nvidia-smi fails), so the example drives the mock CUDA runtime and "
              "mock CUPTI of tests/mocks, whose kernels take made-up times. deepctxd, its probes, the CUPTI "
              "agent and the analyzer are the real ones.")
    print(f"\n\033[1;33m{banner}\033[0m\n", flush=True)
    return ([sys.executable, str(HERE / "simulated_train.py"), str(MOCKS)], {},
            "examples/simulated_train.py on a simulated GPU", ("3", "0.3"))  # seconds


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    command, extra_env, what, (whole, short) = workload()
    with tempfile.TemporaryDirectory(prefix="deepctx-demo-") as tmp:  # the socket; removed on the way out
        sock = os.path.join(tmp, "deepctxd.sock")
        env = dict(os.environ, DEEPCTX_SOCKET=sock, **extra_env)
        env.pop("CUDA_INJECTION64_PATH", None)  # deepctx run names its own agent
        daemon = subprocess.Popen([*DEEPCTXD, "--foreground", "--log-format", "text", "--log-level",
                                   "warning"], env=env)
        try:
            rc = subprocess.run([*DEEPCTX, "status", "--wait", "30"], env=env, stdout=subprocess.DEVNULL).returncode
            if rc != 0:  # deepctx said why, after deepctxd's own messages: no traceback on top of them
                return rc
            print(f"deepctxd is running (pid {daemon.pid}); profiling {what} ...", flush=True)
            deepctx = [*DEEPCTX, "run", "--quiet", "--mode", "exact"]
            profile, trace, html = OUT / "profile.json", OUT / "trace.json", OUT / "report.html"
            # the profile over the whole run; the timeline (every call and kernel) over a short one
            for extra, seconds in ((["--format", "json", "-o", str(profile)], whole), (["--trace", "-o", str(trace)], short)):
                rc = subprocess.run([*deepctx, *extra, "--", *command, seconds], env=env,
                                    stdout=subprocess.DEVNULL).returncode
                if rc != 0:
                    return rc
            # the tree (kernels under the Python lines that launched them, GPU time first), then the findings
            rc = subprocess.run([*DEEPCTX, "report", str(profile), "--min-percent", "2"], env=env).returncode
            if rc != 0:
                return rc
            rc = subprocess.run([*DEEPCTX, "report", str(profile), "--html", str(html)], env=env,
                                stdout=subprocess.DEVNULL).returncode
            if rc != 0:
                return rc
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    # the label again under the findings: the banner has scrolled away by now
    print(f"\nprofiled {what}\n"
          f"written: the profile {profile}\n"
          f"         the timeline {trace} (open it in https://ui.perfetto.dev or chrome://tracing)\n"
          f"         the HTML report {html} (open it in a browser: flame graph, tree, sources, findings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
