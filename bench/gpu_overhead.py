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

    sudo python3 bench/gpu_overhead.py --workloads launch_bound --variants alone,deepctx_sampled_device \
        --alternate 10 [--repeat 3] [--settle 2]

--alternate SECONDS measures in one process per workload instead (bench/workloads.py --marks), since the
step rate of separate processes differs by up to 30% here: blocks of SECONDS alone and under each deepctx
variant in turn (off, v1, off, v2, off, ..., --repeat rounds), each on-block's ratio the mean rate of the
off-blocks either side over its own. An on-block attaches the variant's capture, waits --settle seconds
(the capture's start left out), times the block and ends the capture with the daemon's Stop RPC (what
`deepctx stop` sends); its "ready" is from the stop to the profile in the client's hands. The process carries the CUPTI agent when a device
variant is among them (idle in the off-blocks, as under `deepctx run`).

--witness (with --alternate --pin) runs a CPU-only loop (workloads.py cpu_witness) on a CPU of the workload's
half of its own, timed over the same blocks. On the GPU host the workload's alone blocks ranged 557 to 963
steps/s in one process with no steal time: the CPUs themselves ran at different speeds. An on-block's
"corrected_ratio" is its ratio divided by the witness's (its neighbours' rate over its own in the on-block).
On the H200 host it did not help (BENCHMARKS.md, ninth session): the witness's rate followed what shared its
core, not the workload's drift, and the corrected ratios spread more than the plain ones.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from marks import (  # noqa: E402
    PIN,
    block,
    blocks,
    exit_on_sigterm,
    finish,
    mean_95,
    neighbour_ratio,
    pin_halves,
    pin_process,
    start_marked,
    start_workload,
)

TICK = os.sysconf("SC_CLK_TCK")
STEPS = {"launch_bound": 1500, "launch_backward": 600, "resnet50": 30, "gpt2": 20, "jax": 300, "mock_launch": 1500,
         "cudart_launch": 1500}
# deepctx_exact_nonodes: exact mode without the autograd node probes (autograd_nodes = false), to show
# what charging backward kernels to their forward lines costs
# *_device: started with the CUPTI agent (as `deepctx run` starts it), captured with device activity.
# deepctx_sampled_device: launches left to the agent, which announces a sample of them;
# deepctx_exact_device: exact, launches' call paths taken in the agent's correlation probe (the default);
# deepctx_exact_device_uprobes: exact, launches probed by uprobes instead (agent_calls = "off").
# *_offset: the agent converts CUPTI's own timestamps with a measured offset (DEEPCTX_TIMESTAMP_CB=0)
# instead of giving CUPTI its clock through the timestamp callback.
VARIANTS = ["alone", "deepctx_sampled", "deepctx_exact", "deepctx_exact_nonodes", "deepctx_exact_device",
            "deepctx_exact_device_offset", "deepctx_exact_device_uprobes", "deepctx_sampled_device",
            "deepctx_sampled_device_offset", "deepctx_exact_device_nopython", "deepctx_sampled_device_duty10",
            "deepctx_sampled_device_duty25", "deepctx_exact_device_duty10", "torch_cuda", "torch_stacks",
            "bare_uprobe", "bare_uprobe_driver", "deepctx_exact_nocontinue", "deepctx_exact_device_nocontinue",
            "deepctx_sampled_device_nocontinue"]
# bare_uprobe (--alternate only): no deepctx; an entry and a return uprobe whose programs return at once on
# the workload's launch function (cudaLaunchKernel in its libcudart): the floor any probe of the call pays
# bare_uprobe_driver: the same, and an entry uprobe on each launch entry point of the libcuda it maps, which
# the runtime's launch calls: the floor of deepctx's design on a GPU host, whose probes must keep the driver's
# launches (Triton's, JAX's) and so trap on the runtime's own call into the driver too (issue #31)
# *_nopython: the capture walks no Python frames (`--python off`): what the Python walker costs per call
# *_nocontinue: the daemon's gpu_native_continue off: no lost frame-pointer walk is taken over by .eh_frame
# (on by default, for the calls the GEMM and convolution libraries make)
# *_duty10: the GPU probes and device activity on for 10% of each 2 s period (`--gpu-duty 0.1`), the
# counts and GPU times scaled up (time --alternate blocks in whole periods: 2, 4, 6 s); *_duty25: a quarter
ATTACH_ARGS = {"nopython": ["--python", "off"], "duty10": ["--gpu-duty", "0.1"], "duty25": ["--gpu-duty", "0.25"]}
DAEMON_CONFIGS = {"nonodes": "autograd_nodes = false\n", "uprobes": 'agent_calls = "off"\n',
                  "nocontinue": "gpu_native_continue = false\n"}
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


def write_mappings(pid: int, out: Path, top: int = 25) -> None:
    """The daemon's largest mappings by resident memory (from /proc/PID/smaps): where its RSS is."""
    rows: list[tuple[int, int, str]] = []
    name, rss = "", 0
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            name = head[5] if len(head) > 5 else "[anon]"
        elif line.startswith("Rss:"):
            rss = int(head[1])
        elif line.startswith("Anonymous:"):
            rows.append((rss, int(head[1]), name))
    merged: dict[str, list[int]] = {}
    for rss_kb, anon_kb, n in rows:
        m = merged.setdefault(n, [0, 0])
        m[0] += rss_kb
        m[1] += anon_kb
    lines = [f"{r // 1024:8d} MB rss {a // 1024:8d} MB anon  {n}"
             for n, (r, a) in sorted(merged.items(), key=lambda kv: -kv[1][0])[:top]]
    out.write_text("\n".join(lines) + "\n")


# --daemon-log DIR: each daemon logs at info level to DIR/daemon-NAME.log (compile, attach, collect and build
# times per capture); with --self-profile it writes its own running stacks to DIR/self-NAME.folded when it stops
DAEMON_LOG: dict[str, Any] = {}


class Deepctx:
    def __init__(self, cli: list[str], daemon: list[str], config: str = "", name: str = "default",
                 log: Path | None = None, level: str = "info") -> None:
        """log: the daemon's log file, at `level` (else --daemon-log's folder, at info; else warnings only)."""
        self.tmp = tempfile.mkdtemp(prefix="deepctx-bench-")
        if config:  # "{tmp}" in it: this daemon's own folder
            Path(self.tmp, "d.toml").write_text(config.replace("{tmp}", self.tmp))
            daemon = daemon + ["--config", str(Path(self.tmp, "d.toml"))]
        self.env = dict(os.environ, DEEPCTX_SOCKET=os.path.join(self.tmp, "d.sock"))
        self.cli = cli
        self._stub: Any = None  # stop_capture()'s connection, made at its first use
        log_dir = DAEMON_LOG.get("dir")
        denv, level_default, stderr = self.env, "warning", None
        if log_dir is not None:
            denv = dict(self.env)
            if DAEMON_LOG.get("self"):  # a sampler thread in the daemon: it competes with the build for the GIL
                denv["DEEPCTX_SELF_PROFILE"] = str(log_dir / f"self-{name}.folded")
            if DAEMON_LOG.get("steps"):  # cProfile makes the steps it profiles slower: ready times are off
                denv["DEEPCTX_PROFILE_STEPS"] = str(log_dir / f"steps-{name}")
            level_default, stderr = DAEMON_LOG.get("level", "info"), open(log_dir / f"daemon-{name}.log", "a")  # noqa: SIM115
        if log is not None:
            stderr = open(log, "a")  # noqa: SIM115 (the daemon's)
        level = level if log is not None else level_default
        self.proc = subprocess.Popen(daemon + ["--foreground", "--log-level", level, "--log-format", "json"],
                                     env=denv, stderr=stderr)
        self.run("status", "--wait", "60")

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.cli + list(args), env=self.env, capture_output=True, text=True, check=True)

    def stop_capture(self, pid: int) -> None:
        """Ends the process's captures now: the daemon's Stop RPC from this process when the deepctx package
        imports here (so that a CLI's start-up is not timed as the daemon's), else `deepctx stop`."""
        try:
            from deepctx.cli.client import connect
            from deepctx.proto.v1 import deepctx_pb2 as pb
        except ImportError:
            self.run("stop", str(pid))
            return
        if self._stub is None:
            self._stub = connect(self.env["DEEPCTX_SOCKET"])
        self._stub.Stop(pb.StopRequest(pid=pid))

    def capturing(self, pid: int) -> bool:
        st = json.loads(self.run("status", "--format", "json").stdout)
        return any(s["pid"] == pid and s["state"] == "capturing" for s in st.get("sessions") or [])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def start_capture(dctx: Deepctx, pid: int, variant: str) -> tuple[threading.Thread, dict]:
    """`deepctx attach` in a thread, with the variant's mode and device activity, waited for until the
    daemon captures the process; the thread fills in the profile ("doc") and when it came ("done")."""
    mode = variant.split("_")[1]  # exact | sampled
    device = ["--gpu-activity"] if "_device" in variant else []
    device += ATTACH_ARGS.get(variant.rsplit("_", 1)[-1], [])
    attach: dict = {}

    def go() -> None:
        t = time.perf_counter()
        r = subprocess.run(dctx.cli + ["attach", str(pid), "--duration", "600", "--mode", mode, *device, "--format", "json",
                                       "--quiet"], env=dctx.env, capture_output=True, text=True)
        attach["done"] = time.perf_counter()
        attach["wall"] = attach["done"] - t
        attach["doc"] = json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr}
        log_dir = DAEMON_LOG.get("dir")
        if log_dir is not None and r.returncode == 0:  # the profile itself, for a look at its shape
            n = len(list(log_dir.glob(f"profile-{variant}-*.json")))
            Path(log_dir, f"profile-{variant}-{n + 1}.json").write_text(r.stdout)

    th = threading.Thread(target=go)
    th.start()
    deadline = time.monotonic() + 120
    while not dctx.capturing(pid):  # a run the profiler never attached to is no profiled run
        if time.monotonic() > deadline or not th.is_alive():
            raise RuntimeError(f"pid {pid} {variant}: deepctx did not attach: {attach.get('doc')}")
        time.sleep(0.05)
    return th, attach


STAT_KEYS = {"gpu_api_calls": "gpu_api_calls", "calls_with_path": "gpu_api_calls_with_call_path",
             "device_time_ns": "device_time_ns", "device_unknown": "device_records_unknown_correlation",
             "device_records": "device_records", "device_correlations": "device_correlations",
             "device_calls_reported_by_agent": "device_calls_reported_by_agent", "cpu_samples": "cpu_samples",
             "autograd_nodes_created": "autograd_nodes_created",
             "gpu_calls_charged_to_node_creator": "gpu_calls_charged_to_node_creator",
             "gpu_probe_duty_permille": "gpu_probe_duty_permille",
             "device_time_in_profile_ns": "device_time_in_profile_ns", "device_shares": "device_shares",
             "device_share_ms_active_to_flush": "device_share_ms_active_to_flush",
             "device_share_ms_first_record_to_flush": "device_share_ms_first_record_to_flush",
             "device_share_ms_span": "device_share_ms_span", "device_recorded_ms": "device_recorded_ms",
             "device_share_records": "device_share_records", "device_share_device_ms": "device_share_device_ms",
             "device_share_stale_records": "device_share_stale_records",
             "device_share_stale_ms": "device_share_stale_ms", "device_shares_lost": "device_shares_lost",
             "device_records_unfinished_at_stop": "device_records_unfinished_at_stop"}


def drift(by_second: list[int]) -> float | None:
    """The mean rate of the last third of the whole seconds over that of the first third; None under 3 s."""
    third = len(by_second) // 3
    if third < 1 or not sum(by_second[:third]):
        return None
    return sum(by_second[-third:]) / sum(by_second[:third])


def doc_stats(doc: dict) -> dict:
    """A bench row's share of a capture's profile: its error, or those of the counters above it has (absent is
    not 0: a full capture has no gpu_probe_duty_permille)."""
    if "error" in doc:
        return {"error": doc["error"]}
    st = doc["stats"]
    return {k: st[name] for k, name in STAT_KEYS.items() if name in st}


AGENT_ENV: dict[str, str] = {}  # --agent-env: the agent's settings for every process that carries it


def workload_env(variant: str) -> dict[str, str]:
    env = dict(os.environ)
    if "_device" in variant:  # started as `deepctx run` starts it: the agent idles until attach
        env |= AGENT_ENV | {"CUDA_INJECTION64_PATH": str(AGENT)}
        if variant.endswith("_offset"):
            env["DEEPCTX_TIMESTAMP_CB"] = "0"
    return env


def daemon_for(variant: str, daemons: dict[str, Deepctx]) -> Deepctx:
    return daemons.get(variant.rsplit("_", 1)[-1], daemons["default"])


def one_run(name: str, variant: str, daemons: dict[str, Deepctx], python: str) -> dict:
    dctx = daemon_for(variant, daemons)
    argv = [str(STEPS[name])]
    if variant.startswith("torch_"):
        argv += ["--torch-profiler", "cuda" if variant == "torch_cuda" else "stacks"]
    p, pid = start_workload(name, python, argv, workload_env(variant))
    assert p.stdout is not None and p.stdin is not None
    out: dict = {"workload": name, "variant": variant}
    if variant.startswith("deepctx"):
        try:
            th, attach = start_capture(dctx, pid, variant)
        except RuntimeError:
            p.kill()
            raise
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
    out["steps_by_second"] = [int(n) for n in result[3].split(",")] if len(result) > 3 and result[3] != "-" else []
    p.stdin.close()
    p.wait(timeout=120)
    exited = time.perf_counter()
    if variant.startswith("deepctx"):
        th.join()
        out["profile_ready_s"] = attach["done"] - exited
        out |= doc_stats(attach["doc"])
    return out


class BareUprobe:
    """An entry and a return uprobe on cudaLaunchKernel of the libcudart that pid maps, programs that return
    at once, linked as deepctx links its probes where it has no sessions (uprobe_multi, for pid alone);
    removed by close()."""

    def __init__(self, pid: int, driver: bool = False) -> None:
        from bcc import BPF
        from uprobe_session import file_offset

        from deepctx.host import gpu_apis
        from deepctx.probes.uprobes import BPF_TRACE_UPROBE_MULTI, link_uprobe_multi

        lib = self.mapped(pid, "/libcudart.so")
        offset = file_offset(lib, "cudaLaunchKernel")
        self.bpf = BPF(text=b"int on_entry(void *ctx) { return 0; }\nint on_return(void *ctx) { return 0; }\n")
        entry = self.bpf.load_func(b"on_entry", BPF.KPROBE, attach_type=BPF_TRACE_UPROBE_MULTI).fd
        ret = self.bpf.load_func(b"on_return", BPF.KPROBE, attach_type=BPF_TRACE_UPROBE_MULTI).fd
        self.links = [link_uprobe_multi(entry, lib, [offset], False, pid=pid),
                      link_uprobe_multi(ret, lib, [offset], True, pid=pid)]
        if driver:  # entries only: deepctx leaves a nested driver call's return alone
            cuda = self.mapped(pid, "/libcuda.so")
            offsets = sorted({off for a in gpu_apis.APIS if a.library == "cuda" and a.cls == gpu_apis.LAUNCH
                              for off in [self.offset_or_none(file_offset, cuda, a.symbol)] if off is not None})
            self.links.append(link_uprobe_multi(entry, cuda, offsets, False, pid=pid))

    @staticmethod
    def mapped(pid: int, name: str) -> str:
        libs = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if name in line}
        if len(libs) != 1:
            raise RuntimeError(f"pid {pid} maps {len(libs)} {name[1:]} files; bare_uprobe needs one")
        return libs.pop()

    @staticmethod
    def offset_or_none(file_offset: Any, path: str, symbol: str) -> int | None:
        try:
            return file_offset(path, symbol)
        except SystemExit:  # not in this libcuda
            return None

    def close(self) -> None:
        from deepctx.probes.uprobes import close_links

        close_links(self.links)
        self.bpf.cleanup()


def alternate(name: str, variants: list[str], daemons: dict[str, Deepctx], args: argparse.Namespace) -> list[dict]:
    """One process, blocks off, v1, off, v2, off, ..., --repeat times over the variants: an on-block attaches
    the variant's capture, waits --settle seconds, times --alternate seconds, then ends the capture
    (the daemon's Stop RPC, as `deepctx stop` sends it); its "ready" is from the stop to the profile in hand."""
    on_variants = [v for v in variants if v != "alone"]
    env = workload_env(next((v for v in on_variants if "_device" in v), "alone"))
    log_dir = DAEMON_LOG.get("dir")
    # with a daemon log: every step's end (monotonic), written as the process exits, to set against the
    # shares the daemon logs (bench/duty_shares.py)
    p, pid = start_marked(name, args.python, env,
                          extra=["--step-times", str(log_dir / f"steps-{name}.txt")] if log_dir is not None else None)
    witness: subprocess.Popen | None = None
    rows: list[dict] = []

    def timed(row: dict) -> dict:
        """Times a block of the workload, and of the witness over the same seconds."""
        if witness is None:
            return row | block(p, args.alternate)
        mine, theirs = blocks([p, witness], args.alternate)
        return row | mine | {"witness_steps_per_s": theirs["steps_per_s"]}

    try:
        if args.witness:  # in the try: a witness that does not start still ends the workload
            witness = start_marked("cpu_witness", args.python, cpus=PIN["witness"])[0]
        time.sleep(args.warm)  # warming up: a chosen delay, not synchronization
        prev = timed({"workload": name, "variant": "alone", "mode": "alternate", "block": 0})
        rows.append(prev)
        print(json.dumps(prev), flush=True)
        for i, variant in enumerate(on_variants * args.repeat):
            row: dict = {"workload": name, "variant": variant, "mode": "alternate", "block": 2 * i + 1}
            if variant.startswith("bare_uprobe"):
                probes = BareUprobe(pid, driver=variant == "bare_uprobe_driver")
                try:
                    time.sleep(args.settle)  # a chosen delay before timing, not synchronization
                    row = timed(row)
                finally:
                    probes.close()
                row |= {"daemon_cpu_share": 0.0, "daemon_rss_mb": 0.0, "profile_ready_s": 0.0}
                off = timed({"workload": name, "variant": "alone", "mode": "alternate", "block": 2 * i + 2})
                row["ratio"] = neighbour_ratio(prev, row, off)
                row["cpu_ratio"] = 2 * row["cpu_ms_per_step"] / (prev["cpu_ms_per_step"] + off["cpu_ms_per_step"])
                rows += [row, off]
                print(json.dumps(row), flush=True)
                print(json.dumps(off), flush=True)
                prev = off
                continue
            dctx = daemon_for(variant, daemons)
            th, attach = start_capture(dctx, pid, variant)
            try:
                time.sleep(args.settle)  # a chosen delay before timing, not synchronization
                c0, t0 = cpu_s(dctx.proc.pid), time.perf_counter()
                row = timed(row)
                row["daemon_cpu_share"] = (cpu_s(dctx.proc.pid) - c0) / (time.perf_counter() - t0)
                row["daemon_rss_mb"] = rss_mb(dctx.proc.pid)
                row["daemon_anon_mb"] = rss_mb(dctx.proc.pid, "RssAnon")
                if DAEMON_LOG.get("dir") is not None:
                    write_mappings(dctx.proc.pid, DAEMON_LOG["dir"] / f"smaps-{name}-{variant}-{2 * i + 1}.txt")
            finally:
                stopped = time.perf_counter()
                row["stopped_mono"] = time.monotonic()  # the capture's end; its start is duration_s before
                dctx.stop_capture(pid)
                th.join()
            row["profile_ready_s"] = attach["done"] - stopped
            row["duration_s"] = attach["doc"].get("duration_s")
            row |= doc_stats(attach["doc"])
            if row.get("device_time_in_profile_ns") and attach["doc"].get("duration_s"):
                # the profile's GPU time per step (scaled up where --gpu-duty recorded part of the time), to set
                # against a full capture's: the duty cycle's scaling is right when they agree
                row["profile_gpu_ms_per_step"] = (row["device_time_in_profile_ns"] / 1e6 / attach["doc"]["duration_s"]
                                                  / row["steps_per_s"])
            off = timed({"workload": name, "variant": "alone", "mode": "alternate", "block": 2 * i + 2})
            row["ratio"] = neighbour_ratio(prev, row, off)
            if witness is not None:  # how much slower the host's CPUs ran in the on-block, divided out
                row["witness_ratio"] = (prev["witness_steps_per_s"] + off["witness_steps_per_s"]) / 2 \
                    / row["witness_steps_per_s"]
                row["corrected_ratio"] = row["ratio"] / row["witness_ratio"]
            # the same from the workload's CPU time per step: not moved by a host that ran the loop less
            row["cpu_ratio"] = 2 * row["cpu_ms_per_step"] / (prev["cpu_ms_per_step"] + off["cpu_ms_per_step"])
            rows += [row, off]
            print(json.dumps(row), flush=True)
            print(json.dumps(off), flush=True)
            prev = off
    finally:
        finish(p)
        if witness is not None:
            finish(witness)
    return rows


def alternate_table(rows: list[dict], workloads: list[str]) -> None:
    print(f"\n{'workload':15} {'variant':32} {'blocks':>6} {'ratio median':>12} {'mean [95%]':>21} {'min':>6} {'max':>6} "
          f"{'on steps/s':>10} {'off steps/s':>11} {'daemon CPU':>10} {'RSS MB':>7} {'ready s':>8} "
          f"{'CPU ratio':>9} {'steal':>6} {'GPU ms/step':>11} {'µs/step':>8} {'corrected':>9}")
    for name in workloads:
        off = [r["steps_per_s"] for r in rows if r["workload"] == name and r["variant"] == "alone"]
        seen = [v for v in dict.fromkeys(r["variant"] for r in rows) if v not in VARIANTS]  # e.g. *_nopython
        for v in VARIANTS + seen:
            rs = [r for r in rows if r["workload"] == name and r["variant"] == v and "ratio" in r]
            if not rs:
                continue
            ratios = [r["ratio"] for r in rs]
            mean, lo, hi = mean_95(ratios)
            print(f"{name:15} {v:32} {len(rs):6d} {statistics.median(ratios):12.4f} "
                  f"{mean:6.4f} [{lo:5.3f}-{hi:5.3f}] {min(ratios):6.3f} "
                  f"{max(ratios):6.3f} {statistics.fmean(r['steps_per_s'] for r in rs):10.2f} "
                  f"{statistics.fmean(off):11.2f} {100 * statistics.median(r['daemon_cpu_share'] for r in rs):9.1f}% "
                  f"{max(r['daemon_rss_mb'] for r in rs):7.0f} "
                  f"{statistics.median(r['profile_ready_s'] for r in rs):8.2f} "
                  f"{statistics.median(r['cpu_ratio'] for r in rs):9.3f} "
                  f"{100 * max(r['steal_share'] for r in rs):5.1f}% {gpu_ms_per_step(rs):>11} "
                  f"{statistics.median(extra_us_per_step(r) for r in rs):8.2f}"
                  + (f" {statistics.median(r['corrected_ratio'] for r in rs):9.4f}" if "corrected_ratio" in rs[0] else ""))


def extra_us_per_step(row: dict) -> float:
    """What the variant added to a step, in µs: 1/on - 1/off, off being the neighbours' mean rate (ratio x on).
    The cost per call of a workload of 100 calls a step (launch_bound, mock_launch, cudart_launch) is this / 100."""
    return 1e6 * (1 - 1 / row["ratio"]) / row["steps_per_s"]


def gpu_ms_per_step(rs: list[dict]) -> str:
    """The median of the profiles' GPU time per step (a --gpu-duty row's scaled up): a duty cycle's scaling
    is right when its rows agree with the full captures' ("-": no device activity in the profile)."""
    ms = [r["profile_gpu_ms_per_step"] for r in rs if "profile_gpu_ms_per_step" in r]
    return f"{statistics.median(ms):.2f}" if ms else "-"


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
    ap.add_argument("--alternate", type=float, metavar="SECONDS",
                    help="one process per workload: blocks of SECONDS alone and under each deepctx variant, "
                         "alternating (--repeat rounds over the variants)")
    ap.add_argument("--warm", type=float, default=5.0, help="--alternate: seconds of steps before the first block")
    ap.add_argument("--settle", type=float, default=2.0,
                    help="--alternate: seconds from the capture's start to its block's start")
    ap.add_argument("--pin", action="store_true",
                    help="--alternate: the workload on the first half of the CPUs, the daemons on the rest")
    ap.add_argument("--witness", action="store_true",
                    help="--alternate --pin: a CPU-only loop on one of the workload's CPUs, timed in the same "
                         "blocks; each on-block's ratio is also given divided by how much slower it ran "
                         "(corrected ratio): the host's CPU speed moves between blocks")
    ap.add_argument("--agent-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for processes that carry the agent (DEEPCTX_SAMPLE_US=1000, ...)")
    ap.add_argument("--daemon-log", metavar="DIR",
                    help="daemons log at info level to DIR/daemon-NAME.log (and --self-profile to DIR/self-NAME.folded); "
                         "the profiles go to DIR/profile-VARIANT-N.json")
    ap.add_argument("--daemon-log-level", choices=["debug", "info"], default="info",
                    help="with --daemon-log: debug adds each duty cycle's switches and attached shares (device_share.py)")
    ap.add_argument("--self-profile", action="store_true",
                    help="with --daemon-log: the daemon samples its own threads' stacks into DIR/self-NAME.folded "
                         "(50 wake-ups a second holding the GIL: its ready times are a little longer)")
    ap.add_argument("--profile-steps", action="store_true",
                    help="with --daemon-log: cProfile of each profile's build and message conversion in "
                         "DIR/steps-NAME/ (slows those steps: the ready times are then not figures)")
    ap.add_argument("--bpf-stats", action="store_true",
                    help="with --daemon-log: the kernel counts each BPF program's runs and run time "
                         "(kernel.bpf_stats_enabled, a few tens of ns a run) and the daemon logs them per capture")
    ap.add_argument("--out")
    args = ap.parse_args()
    exit_on_sigterm()
    if args.bpf_stats:
        if not args.daemon_log:
            ap.error("--bpf-stats goes with --daemon-log (the figures are in its log)")
        from deepctx.probes.program_stats import STATS_SYSCTL  # here: the rest runs without the package

        was = STATS_SYSCTL.read_text().strip()
        STATS_SYSCTL.write_text("1")
        atexit.register(STATS_SYSCTL.write_text, was)
    if args.daemon_log:
        DAEMON_LOG["dir"] = Path(args.daemon_log)
        DAEMON_LOG["level"] = args.daemon_log_level
        DAEMON_LOG["steps"] = args.profile_steps
        DAEMON_LOG["self"] = args.self_profile
        DAEMON_LOG["dir"].mkdir(parents=True, exist_ok=True)
    for item in args.agent_env:
        k, _, v = item.partition("=")
        AGENT_ENV[k] = v
    if args.pin:
        if not args.alternate:
            ap.error("--pin goes with --alternate")
        pin_halves(witness=args.witness)
    elif args.witness:
        ap.error("--witness goes with --alternate --pin (it needs a CPU of the workload's half)")
    if args.alternate:
        bad = [v for v in args.variants.split(",")
               if (v not in ("alone", "bare_uprobe", "bare_uprobe_driver") and not v.startswith("deepctx"))
               or v.endswith("_offset")]
        if bad:
            ap.error(f"--alternate runs deepctx variants in one process; not {bad} (a profiler of its own, or an "
                     "agent setting fixed at the process's start)")
    for item in args.steps:
        name, n = item.split("=")
        STEPS[name] = int(n)
    daemons = {"default": Deepctx(args.deepctx.split(), args.deepctxd.split())}
    for suffix, config in DAEMON_CONFIGS.items():
        if any(v.endswith("_" + suffix) for v in args.variants.split(",")):
            daemons[suffix] = Deepctx(args.deepctx.split(), args.deepctxd.split(), config, suffix)
    if PIN:
        for d in daemons.values():
            pin_process(d.proc.pid, PIN["daemon"])  # threads it starts later inherit the mask
    rows: list[dict] = []
    try:
        for name in args.workloads.split(","):
            if args.alternate:
                rows += alternate(name, args.variants.split(","), daemons, args)
                continue
            variants = [v for v in args.variants.split(",") if not (name == "jax" and v.startswith("torch_"))]
            for _ in range(args.repeat):
                for v in variants:
                    r = one_run(name, v, daemons, args.python)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        for d in daemons.values():
            d.stop()
    if args.alternate:
        alternate_table(rows, args.workloads.split(","))
        if args.out:
            Path(args.out).write_text(json.dumps(rows, indent=1))
        return 0
    print()
    # drift: the rate of the timed steps' last third of whole seconds over their first third; a profiler whose
    # cost grows over a capture shows a drift below alone's (issue #31: "no cost creeping up")
    print(f"{'workload':15} {'variant':32} {'steps/s':>9} {'ratio':>6} {'daemon CPU':>10} {'RSS MB':>7} {'ready s':>8} "
          f"{'drift':>6}")
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
            drifts = [d for d in (drift(r.get("steps_by_second", [])) for r in rs) if d is not None]
            shown = f"{statistics.median(drifts):6.3f}" if drifts else f"{'-':>6}"
            print(f"{name:15} {v:32} {sps:9.2f} {base / sps:6.3f} {100 * cpu:9.1f}% {rss:7.0f} "
                  f"{statistics.median(ready):8.2f} {shown}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
