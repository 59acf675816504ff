"""How long a profile takes to be ready after its capture ends, on many distinct call paths (no GPU needed).

    sudo .venv/bin/python bench/profile_build.py [--sites 2000] [--calls 10] [--depth 20] [--self-profile OUT]
                                                 [--device KERNELS [--mode sampled]] [--profile-steps DIR]

The target, a Python program generated here, calls the real CUDA runtime (the nvidia-cuda-runtime wheel;
without a GPU each call fails, the probes fire anyway) from --sites distinct lines, each --calls times, under
a Python stack --depth frames deep: about the shape of a ResNet-50 training capture (23,580 calls, a few
thousand call paths). An exact-mode attach runs until the daemon's Stop RPC (`deepctx stop`) ends it; printed: the
daemon's `build_s` (its log) and *ready*, from the stop to the profile in the client's hands. With --self-profile the
daemon writes its running threads' stacks there (DEEPCTX_SELF_PROFILE) when it stops; with --profile-steps a
cProfile of the build and message steps (DEEPCTX_PROFILE_STEPS: the ready time is then no figure).

--device KERNELS: the target runs on the mock CUDA driver, runtime and CUPTI of tests/mocks with the real CUPTI
agent (built with make; CUPTI's headers needed), each site launching KERNELS distinct kernels, so the build also
joins device activity: sites x KERNELS device buckets under their lines, the shape of a GPU training capture.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "integration" / "device")]

from device_paths import AGENT, MOCKS, cupti_mocks_built, make_agents_and_mocks  # noqa: E402
from gpu_overhead import doc_nodes  # noqa: E402
from harness import DEEPCTX, StdinTarget, session_of, start_daemon, stop_daemon, wait_for  # noqa: E402
from targets.gpu.many_sites import device_source, source  # noqa: E402

from deepctx.cli.client import connect  # noqa: E402
from deepctx.proto.v1 import deepctx_pb2 as pb  # noqa: E402


def cuda_runtime() -> str:
    import nvidia

    for base in nvidia.__path__:
        for lib in sorted(Path(base).glob("cu*/lib/libcudart.so.*")):
            return str(lib)
    raise SystemExit("pip package nvidia-cuda-runtime is not installed (./install.sh installs it)")


def mock_cuda() -> tuple[Path, Path]:
    """(the CUPTI agent, the mock CUDA libraries' folder), built as the device tests build them."""
    make_agents_and_mocks()
    if not cupti_mocks_built():
        raise SystemExit("the CUPTI agent and the mocks need CUPTI's headers (pip install nvidia-cuda-cupti)")
    return AGENT, MOCKS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sites", type=int, default=2000)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--self-profile")
    ap.add_argument("--profile-steps", metavar="DIR")
    ap.add_argument("--device", type=int, default=0, metavar="KERNELS")
    ap.add_argument("--mode", choices=["exact", "sampled"], default="exact")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="deepctx-build-"))
    script = tmp / "target.py"
    env = dict(os.environ)
    if args.device:
        agent, mocks = mock_cuda()
        script.write_text(device_source(str(mocks), args.sites, args.calls, args.depth, args.device))
        env["CUDA_INJECTION64_PATH"] = str(agent)
    else:
        script.write_text(source(cuda_runtime(), args.sites, args.calls, args.depth, linger=True))
    if args.self_profile:
        os.environ["DEEPCTX_SELF_PROFILE"] = str(Path(args.self_profile).resolve())
    if args.profile_steps:
        os.environ["DEEPCTX_PROFILE_STEPS"] = str(Path(args.profile_steps).resolve())
    d = start_daemon(tmp)
    try:
        t = StdinTarget([sys.executable, str(script)], env=env)
        out = tmp / "profile.json"
        attach = subprocess.Popen([*DEEPCTX, "attach", str(t.pid), "--mode", args.mode, "--duration", "600",
                                   "--format", "json", "--quiet", "-o", str(out)], env=d.env())
        wait_for(lambda: (session_of(d, t.pid) or {}).get("state") == "capturing", timeout=120,
                 what="the capture")
        t.go()
        t.expect("done")
        # Ended by the daemon's Stop RPC while the target lives, as `deepctx stop` ends it: a target that
        # exits takes its last half-second of unnamed Python stacks with it (all of them, in a run this
        # short), and the profile would not be the one a user gets.
        stub = connect(d.socket)
        stopped, stopped_unix = time.monotonic(), time.time()
        stub.Stop(pb.StopRequest(pid=t.pid))
        assert attach.wait(timeout=600) == 0
        ready = time.monotonic() - stopped
        t.stop()
        doc = json.loads(out.read_text())
    finally:
        stop_daemon(d)
    log = [json.loads(x) for x in d.log.read_text().splitlines() if x.startswith("{")]
    builds = [e for e in log if e.get("msg") == "profile built"]
    for e in log:  # the daemon's steps after the stop, in seconds from it
        if e.get("ts", 0) >= stopped_unix - 0.5:
            print(f"  +{e['ts'] - stopped_unix:6.3f} s  {e.get('msg')}")
    calls = sum(n["metrics"].get("calls", 0) for n in doc_nodes(doc) if n["kind"] == "kernel")
    device = (f", {doc['stats'].get('device_records', 0)} device records, "
              f"{doc['stats'].get('device_time_in_profile_ns', 0) / 1e6:.1f} ms of device time") if args.device else ""
    print(f"sites {args.sites} x {args.calls} calls, depth {args.depth}, {args.mode}: {len(doc_nodes(doc))} nodes, "
          f"{calls} launches{device}; build_s {builds[-1]['build_s'] if builds else '?'}; ready {ready:.2f} s")
    return 0



if __name__ == "__main__":
    sys.exit(main())
