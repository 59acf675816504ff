"""GPU overhead, side by side in one run: each workload alone, under deepctx (sampled and exact) and
under the PyTorch profiler (CPU+CUDA, and with stacks).

    sudo python3 bench/gpu_overhead.py [--workloads launch_bound,resnet50,gpt2,jax] [--out results.json]

For every workload and variant it starts a fresh process (bench/workloads.py), warms it up, attaches
the profiler where there is one, runs the timed steps and reports:
  ratio      steps/s alone divided by steps/s under the profiler (1.00 = no slowdown)
  daemon CPU deepctxd's CPU time over the timed steps, as a share of one core
  daemon RSS deepctxd's resident memory at the end of the timed steps
  ready      seconds from the capture's end (the target exiting) to the profile in the client's hands;
             for the PyTorch profiler, its trace export time
Variants alternate (alone, deepctx, ..., alone) and each is run --repeat times; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")
STEPS = {"launch_bound": 1500, "launch_backward": 600, "resnet50": 30, "gpt2": 20, "jax": 300}
# deepctx_exact_nonodes: exact mode without the autograd node probes (autograd_nodes = false), to show
# what charging backward kernels to their forward lines costs
# *_device: started with the CUPTI agent (as `deepctx run` starts it), captured with device activity.
# deepctx_sampled_device: launches left to the agent, which announces a sample of them (the default with
# the agent in sampled mode); deepctx_exact_device_agentcalls: exact, launches' call paths taken in the
# agent's correlation probe instead of uprobes (agent_calls = "on").
# *_offset: the agent converts CUPTI's own timestamps with a measured offset (DEEPCTX_TIMESTAMP_CB=0)
# instead of giving CUPTI its clock through the timestamp callback.
VARIANTS = ["alone", "deepctx_sampled", "deepctx_exact", "deepctx_exact_nonodes", "deepctx_exact_device",
            "deepctx_exact_device_offset", "deepctx_exact_device_agentcalls", "deepctx_sampled_device",
            "deepctx_sampled_device_offset", "torch_cuda", "torch_stacks"]
DAEMON_CONFIGS = {"nonodes": "autograd_nodes = false\n", "agentcalls": 'agent_calls = "on"\n'}
AGENT = HERE.parent / "native" / "build" / "libdeepctx_cupti.so"


def cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def doc_nodes(doc: dict) -> list[dict]:
    """Every node of a profile JSON document (docs/formats.md), the root first."""
    out, stack = [], [doc["root"]] if doc.get("root") else []
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n["children"])
    return out


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory in MB: VmRSS (all), RssAnon (the daemon's own: heap, numpy tables, BPF map copies)
    or RssFile (mapped files: libLLVM, the symbol tables it keeps mapped; clean, reclaimable pages)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


class Deepctx:
    def __init__(self, cli: list[str], daemon: list[str], config: str = "") -> None:
        self.tmp = tempfile.mkdtemp(prefix="deepctx-bench-")
        if config:  # "{tmp}" in it: this daemon's own folder
            Path(self.tmp, "d.toml").write_text(config.replace("{tmp}", self.tmp))
            daemon = daemon + ["--config", str(Path(self.tmp, "d.toml"))]
        self.env = dict(os.environ, DEEPCTX_SOCKET=os.path.join(self.tmp, "d.sock"))
        self.cli = cli
        self.proc = subprocess.Popen(daemon + ["--foreground", "--log-level", "warning"], env=self.env)
        self.run("status", "--wait", "60")

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.cli + list(args), env=self.env, capture_output=True, text=True, check=True)

    def capturing(self, pid: int) -> bool:
        st = json.loads(self.run("status", "--format", "json").stdout)
        return any(s["pid"] == pid and s["state"] == "capturing" for s in st.get("sessions") or [])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def one_run(name: str, variant: str, daemons: dict[str, Deepctx], python: str) -> dict:
    dctx = daemons.get(variant.rsplit("_", 1)[-1], daemons["default"])
    argv = [python, str(HERE / "workloads.py"), name, str(STEPS[name])]
    if variant.startswith("torch_"):
        argv += ["--torch-profiler", "cuda" if variant == "torch_cuda" else "stacks"]
    env = dict(os.environ)
    if "_device" in variant:  # started as `deepctx run` starts it: the agent idles until attach
        env["CUDA_INJECTION64_PATH"] = str(AGENT)
        if variant.endswith("_offset"):
            env["DEEPCTX_TIMESTAMP_CB"] = "0"
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None and p.stdin is not None
    ready = p.stdout.readline().split()
    assert ready and ready[0] == "ready", f"{name}: {ready}"
    pid = int(ready[1])
    out: dict = {"workload": name, "variant": variant}
    attach: dict = {}
    if variant.startswith("deepctx"):
        mode = variant.split("_")[1]  # exact | sampled
        device = ["--gpu-activity"] if "_device" in variant else []

        def go() -> None:
            t = time.perf_counter()
            r = subprocess.run(dctx.cli + ["attach", str(pid), "--duration", "600", "--mode", mode, *device, "--format", "json",
                                           "--quiet"], env=dctx.env, capture_output=True, text=True)
            attach["done"] = time.perf_counter()
            attach["wall"] = attach["done"] - t
            attach["doc"] = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr}

        th = threading.Thread(target=go)
        th.start()
        deadline = time.monotonic() + 120
        while not dctx.capturing(pid):  # a run the profiler never attached to is no profiled run
            if time.monotonic() > deadline or not th.is_alive():
                p.kill()
                raise RuntimeError(f"{name} {variant}: deepctx did not attach: {attach.get('doc')}")
            time.sleep(0.05)
    c0 = cpu_s(dctx.proc.pid)
    t0 = time.perf_counter()
    p.stdin.write("go\n")
    p.stdin.flush()
    result = p.stdout.readline().split()
    wall = time.perf_counter() - t0
    out["daemon_cpu_share"] = (cpu_s(dctx.proc.pid) - c0) / wall
    out["daemon_rss_mb"] = rss_mb(dctx.proc.pid)
    out["daemon_anon_mb"] = rss_mb(dctx.proc.pid, "RssAnon")
    out["steps_per_s"] = float(result[1])
    out["torch_export_s"] = float(result[2])
    p.stdin.close()
    p.wait(timeout=120)
    exited = time.perf_counter()
    if variant.startswith("deepctx"):
        th.join()
        out["profile_ready_s"] = attach["done"] - exited
        doc = attach["doc"]
        if "error" in doc:
            out["error"] = doc["error"]
        else:
            st = doc["stats"]
            out["gpu_api_calls"] = st.get("gpu_api_calls", 0)
            out["calls_with_path"] = st.get("gpu_api_calls_with_call_path", 0)
            out["device_time_ns"] = st.get("device_time_ns", 0)
            out["device_unknown"] = st.get("device_records_unknown_correlation", 0)
            out["device_records"] = st.get("device_records", 0)
            out["device_correlations"] = st.get("device_correlations", 0)
            out["device_calls_reported_by_agent"] = st.get("device_calls_reported_by_agent", 0)
            out["cpu_samples"] = st.get("cpu_samples", 0)
            out["autograd_nodes_created"] = st.get("autograd_nodes_created", 0)
            out["gpu_calls_charged_to_node_creator"] = st.get("gpu_calls_charged_to_node_creator", 0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="launch_bound,resnet50,gpt2,jax")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--steps", action="append", default=[], metavar="WORKLOAD=N",
                    help="timed steps of a workload (more steps: less of the capture's start in the figure)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--deepctx", default="deepctx", help="the CLI (a path or a command)")
    ap.add_argument("--deepctxd", default="deepctxd")
    ap.add_argument("--out")
    args = ap.parse_args()
    for item in args.steps:
        name, n = item.split("=")
        STEPS[name] = int(n)
    daemons = {"default": Deepctx(args.deepctx.split(), args.deepctxd.split())}
    for suffix, config in DAEMON_CONFIGS.items():
        if any(v.endswith("_" + suffix) for v in args.variants.split(",")):
            daemons[suffix] = Deepctx(args.deepctx.split(), args.deepctxd.split(), config)
    rows: list[dict] = []
    try:
        for name in args.workloads.split(","):
            variants = [v for v in args.variants.split(",") if not (name == "jax" and v.startswith("torch_"))]
            for _ in range(args.repeat):
                for v in variants:
                    r = one_run(name, v, daemons, args.python)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        for d in daemons.values():
            d.stop()
    print()
    print(f"{'workload':15} {'variant':32} {'steps/s':>9} {'ratio':>6} {'daemon CPU':>10} {'RSS MB':>7} {'ready s':>8}")
    for name in args.workloads.split(","):
        base = statistics.median(r["steps_per_s"] for r in rows if r["workload"] == name and r["variant"] == "alone")
        for v in VARIANTS:
            rs = [r for r in rows if r["workload"] == name and r["variant"] == v]
            if not rs:
                continue
            sps = statistics.median(r["steps_per_s"] for r in rs)
            ready = [r.get("profile_ready_s", r["torch_export_s"]) for r in rs]
            cpu = statistics.median(r["daemon_cpu_share"] for r in rs)
            rss = max(r["daemon_rss_mb"] for r in rs)
            print(f"{name:15} {v:32} {sps:9.2f} {base / sps:6.3f} {100 * cpu:9.1f}% {rss:7.0f} "
                  f"{statistics.median(ready):8.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
