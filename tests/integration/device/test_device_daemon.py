"""Device activity through deepctxd and the CLI: `deepctx run`, `deepctx attach --gpu-activity` (agent
loaded at attach) and `--trace` (Chrome/Perfetto JSON with Kineto's conventions), on the mock CUDA
libraries, with exact GPU times under the Python lines that launched the work."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import subprocess
import sys
from pathlib import Path

from device_paths import TARGET
from harness import DEEPCTX, StdinTarget, line_of, session_of, stop_run, wait_for
from profile_paths import walk

from deepctx.probes.device_activity import DEV_AGENT_ACTIVE

sys.path.insert(0, str(TARGET.parent))
import mock_target as mt  # noqa: E402

MATMUL = "mock_matmul(float*, int)"
RELU = "mock_relu(float*)"


def no_injection_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}


def gpu_at_line(doc: dict, marker: str) -> dict[tuple[str, str], int]:
    """GPU time per (kind, name) of the nodes below the target's Python frame at `marker`'s line."""
    line = line_of(TARGET, marker)
    out: dict[tuple[str, str], int] = {}
    for anc, node in walk(doc):
        if node["metrics"]["gpu_time_ns"] and any(
                a["kind"] == "python" and (a["file"] or "").endswith("mock_target.py") and a["line"] == line
                for a in anc):
            key = (node["kind"], node["name"])
            out[key] = out.get(key, 0) + node["metrics"]["gpu_time_ns"]
    return out


def check_exact(doc: dict) -> None:
    assert gpu_at_line(doc, "LINE_MATMUL") == {("kernel", MATMUL): mt.N_MATMUL * mt.MATMUL_NS}
    assert gpu_at_line(doc, "LINE_RELU") == {("kernel", RELU): mt.N_RELU * mt.RELU_NS}
    assert gpu_at_line(doc, "LINE_COPY") == {("memcpy", "HtoD"): mt.N_COPY * mt.COPY_BYTES}
    assert gpu_at_line(doc, "LINE_SET") == {("memset", "memset"): mt.N_SET * mt.SET_BYTES}
    assert gpu_at_line(doc, "LINE_GRAPH") == {("kernel", MATMUL): mt.N_GRAPH * 2 * mt.MATMUL_NS,
                                              ("kernel", RELU): mt.N_GRAPH * mt.RELU_NS}
    stats = doc["stats"]
    assert stats["device_records_unknown_correlation"] == 0
    assert stats["device_time_ns"] == stats["device_time_in_profile_ns"]


def session_pid(daemon) -> int:
    """The pid of the one capture, once it runs."""
    def capturing() -> int | None:
        r = daemon.cli("status", "--format", "json")
        sessions = json.loads(r.stdout).get("sessions") or []
        return int(sessions[0]["pid"]) if sessions and sessions[0]["state"] == "capturing" else None

    return wait_for(capturing, what="the capture running")


def capture(daemon, t: StdinTarget, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`deepctx attach` with args over one phase of the target; the capture ends with the target."""
    with cf.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(daemon.cli, "attach", str(t.pid), "--duration", "300", "--quiet", "--mode", "exact", *args,
                          timeout=timeout)
        wait_for(lambda: (session_of(daemon, t.pid) or {}).get("state") == "capturing" or fut.done(),
                 what="capture running", timeout=120)
        if fut.done():
            return fut.result()
        t.go()
        t.expect("cupti")
        t.expect("done")
        stop = daemon.cli("stop", str(t.pid))  # the window closes while the target lives: an explicit flush
        assert stop.returncode == 0, stop.stderr
        return fut.result()


def test_run_profiles_device_activity_from_the_first_kernel(daemon, built: tuple[Path, Path], tmp_path: Path) -> None:
    """The target's "ready" comes after cuInit, which the agent holds until the capture runs."""
    _, lib = built
    out = tmp_path / "run.json"
    run = StdinTarget([*DEEPCTX, "run", "--quiet", "--mode", "exact", "-o", str(out), "--format", "json", "--", sys.executable,
                       str(TARGET), str(lib)], env=no_injection_env() | {"DEEPCTX_SOCKET": daemon.socket})
    try:
        assert run.pid == session_pid(daemon)  # "ready <pid>": the target's, printed once it is watched
        run.go()
        assert run.expect("cupti").split()[1] == "1"  # watched from its first call: the agent holds CUPTI
        run.expect("done")
        target = int(session_pid(daemon))
        stop_run(daemon, run, target)  # the target exits; deepctx run writes the profile and returns its status
    finally:
        run.stop()
    doc = json.loads(out.read_text())
    assert doc["ended"] == "stopped"
    check_exact(doc)
    assert doc["stats"]["device_agent_injected"] == 0  # the command loaded it itself (CUDA_INJECTION64_PATH)


def test_run_returns_the_commands_status_without_cuda(daemon) -> None:
    r = subprocess.run([*DEEPCTX, "run", "--", sys.executable, "-c", "raise SystemExit(7)"],
                       env=daemon.env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 7
    assert "never initialized CUDA" in r.stderr


def test_attach_gpu_activity_loads_the_agent(daemon, built: tuple[Path, Path], tmp_path: Path) -> None:
    _, lib = built
    t = StdinTarget([sys.executable, str(TARGET), str(lib)], env=no_injection_env())
    out = tmp_path / "attach.json"
    try:
        r = capture(daemon, t, "--gpu-activity", "-o", str(out))
    finally:
        t.stop()
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    check_exact(doc)
    assert doc["stats"]["device_agent_injected"] == 1


def test_attach_gpu_activity_awaits_the_agent_the_environment_names(daemon, built: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    """A process started with the agent in its environment, attached before it starts CUDA: nothing to
    inject (the driver loads the agent at cuInit), so the capture waits for the agent, attaches when it loads,
    and its device times are exact from then on."""
    agent, lib = built
    t = StdinTarget([sys.executable, str(TARGET), str(lib), "--late-init"],
                    env=no_injection_env() | {"CUDA_INJECTION64_PATH": str(agent)})
    out = tmp_path / "late.json"

    def stats() -> dict[str, int]:
        return {k: int(v) for k, v in ((session_of(daemon, t.pid) or {}).get("stats") or {}).items()}

    try:
        with cf.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(daemon.cli, "attach", str(t.pid), "--duration", "300", "--quiet", "--mode", "exact",
                              "--gpu-activity", "--format", "json", "-o", str(out), timeout=120)
            wait_for(lambda: stats().get("device_agent_awaited") == 1 or fut.done(), what="the capture awaiting")
            assert not fut.done(), fut.result().stderr
            t.go()  # cuInit: the driver loads the agent
            t.expect("initialized")
            wait_for(lambda: stats().get("device_agent_status") == DEV_AGENT_ACTIVE, what="the agent reporting")
            t.go()
            t.expect("cupti")
            t.expect("done")
            assert daemon.cli("stop", str(t.pid)).returncode == 0
            r = fut.result()
    finally:
        t.stop()
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    check_exact(doc)
    assert (doc["stats"]["device_agent_injected"], doc["stats"]["device_agent_awaited"]) == (0, 0)


def test_attach_gpu_activity_refuses_without_a_cuda_context(daemon, built: tuple[Path, Path]) -> None:
    _, lib = built
    t = StdinTarget([sys.executable, str(TARGET), str(lib), "--no-init"], env=no_injection_env())
    try:
        r = daemon.cli("attach", str(t.pid), "--duration", "5", "--gpu-activity", "--quiet")
        assert r.returncode != 0
        assert "no CUDA context yet" in r.stderr, r.stderr
        t.go()  # unharmed: it works and finishes
        t.expect("cupti")
        t.expect("done")
    finally:
        t.stop()
    assert daemon.alive()


def test_trace_export_follows_kinetos_conventions(daemon, built: tuple[Path, Path], tmp_path: Path) -> None:
    agent, lib = built
    t = StdinTarget([sys.executable, str(TARGET), str(lib)], env=no_injection_env() | {
        "CUDA_INJECTION64_PATH": str(agent)})
    out = tmp_path / "trace.json"
    try:
        r = capture(daemon, t, "--trace", "-o", str(out))
    finally:
        t.stop()
    assert r.returncode == 0, r.stderr
    trace = json.loads(out.read_text())
    events = trace["traceEvents"]
    by_cat: dict[str, list[dict]] = {}
    for e in events:
        by_cat.setdefault(e.get("cat", ""), []).append(e)
    kernels = by_cat["kernel"]
    assert len(kernels) == mt.N_MATMUL + mt.N_RELU + 3 * mt.N_GRAPH
    assert len(by_cat["gpu_memcpy"]) == mt.N_COPY and len(by_cat["gpu_memset"]) == mt.N_SET
    matmuls = [e for e in kernels if e["name"] == MATMUL]
    assert len(matmuls) == mt.N_MATMUL + 2 * mt.N_GRAPH
    # Chrome's unit is the microsecond: each slice is within 1 us of the device's nanoseconds
    assert abs(sum(e["dur"] for e in matmuls) * 1000 - len(matmuls) * mt.MATMUL_NS) <= 1000 * len(matmuls)
    runtime = {e["args"]["correlation"]: e for e in by_cat["cuda_runtime"] + by_cat["cuda_driver"]}
    for e in kernels + by_cat["gpu_memcpy"] + by_cat["gpu_memset"]:
        assert e["args"]["correlation"] == e["args"]["External id"]
        assert e["args"]["correlation"] in runtime  # every piece of device work has its launch
    flows = [e for e in by_cat["ac2g"] if e["ph"] == "s"]
    assert len(flows) == len(kernels) + mt.N_COPY + mt.N_SET + 1  # + the sync record
    assert not trace["deepctx"]["synthetic"]


def kernel_calls(doc: dict, api: str, kernel: str) -> int:
    return sum(node["metrics"]["calls"] for anc, node in walk(doc)
               if node["kind"] == "kernel" and node["name"] == kernel and anc and anc[-1]["name"] == api)


def sampled_profile(daemon, built: tuple[Path, Path], tmp_path: Path, env: dict[str, str], *args: str) -> dict:
    """`deepctx attach --mode sampled` over one phase of the mock target started with the agent."""
    agent, lib = built
    t = StdinTarget([sys.executable, str(TARGET), str(lib), *args], env=no_injection_env() | {
        "CUDA_INJECTION64_PATH": str(agent), **env})
    out = tmp_path / "sampled.json"
    try:
        r = capture(daemon, t, "--mode", "sampled", "-o", str(out))
    finally:
        t.stop()
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def test_sampled_attach_leaves_launches_to_the_agent(daemon, built: tuple[Path, Path], tmp_path: Path) -> None:
    """--mode sampled with the agent there: launches are counted from its records, not by uprobes, and
    (every call announced here) land exactly on their lines."""
    doc = sampled_profile(daemon, built, tmp_path, {"DEEPCTX_SAMPLE_US": "0"})
    assert gpu_at_line(doc, "LINE_MATMUL") == {("kernel", MATMUL): mt.N_MATMUL * mt.MATMUL_NS}
    assert gpu_at_line(doc, "LINE_RELU") == {("kernel", RELU): mt.N_RELU * mt.RELU_NS}
    assert kernel_calls(doc, "cudaLaunchKernel", MATMUL) == mt.N_MATMUL
    assert kernel_calls(doc, "cuLaunchKernel", RELU) == mt.N_RELU
    stats = doc["stats"]
    assert stats["device_calls_reported_by_agent"] == mt.N_MATMUL + mt.N_RELU
    assert stats["device_records_unknown_correlation"] == 0
    assert stats["device_time_ns"] == stats["device_time_in_profile_ns"]


def test_sampled_attach_probes_launches_when_the_agent_cannot_report(daemon, built: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    """Another profiler holds CUPTI, so the agent never started: the uprobes count the launches after all,
    and the profile says why there is no device time."""
    doc = sampled_profile(daemon, built, tmp_path, {}, "--hold-cupti")
    assert kernel_calls(doc, "cudaLaunchKernel", MATMUL) == mt.N_MATMUL
    # a bare handle, made before the capture: the agent's records would name it, and the node says so
    assert kernel_calls(doc, "cuLaunchKernel", "[kernel named by the agent only]") == mt.N_RELU
    assert doc["stats"]["gpu_calls_kernel_named_by_agent_only"] == mt.N_RELU
    assert any(w.startswith("[kernel named by the agent only] on ") for w in doc["warnings"]), doc["warnings"]
    assert any("launches are probed by uprobes instead" in w for w in doc["warnings"]), doc["warnings"]
    # and the agent's own words, read from the process (not only the kind of failure its status tells)
    said = [w for w in doc["warnings"] if w.startswith("the CUPTI agent's error: ")]
    assert said == ["the CUPTI agent's error: CUPTI is held by another profiler (one subscriber at a time)"], \
        doc["warnings"]
    assert doc["stats"].get("device_calls_reported_by_agent", 0) == 0
    assert daemon.alive()
