"""PC sampling end to end without a GPU: the real CUPTI agent (native/pc_sampling.c) samples through the mock
PC Sampling API (tests/mocks/mock_cupti_pcs.c), its pcs probe reaches the real BPF program, and the daemon's
reader gets back exactly the samples, names, stall reasons, cubin and device the mock made (root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from c_layout import c_values, struct_layout
from capture_util import Result, run_capture
from device_paths import REPO
from harness import Daemon, StdinTarget, start_daemon, stop_daemon

from deepctx.host import sass
from deepctx.probes import pc_sampling as pcs
from deepctx.probes.device_activity import DeviceActivity

TARGET = Path(__file__).resolve().parent / "pcs_target.py"
CUBIN = REPO / "tests" / "fixtures" / "cubin" / "pcs_kernels.sm_90.cubin"
SAMPLES = "saxpy@0xd0:11:3,saxpy@0x100:12:1,strided_copy@0x250:11:5"
sys.path.insert(0, str(TARGET.parent))
import pcs_target as pt  # noqa: E402


def start(built: tuple[Path, Path], **extra_env: str) -> StdinTarget:
    agent, lib = built
    env = dict(os.environ) | {"CUDA_INJECTION64_PATH": str(agent), "MOCK_CUBIN": str(CUBIN),
                              "MOCK_PCS_SAMPLES": SAMPLES} | extra_env
    return StdinTarget([sys.executable, str(TARGET), str(lib), str(agent)], env=env)


def capture(built: tuple[Path, Path], **extra_env: str) -> tuple[Result, DeviceActivity]:
    """Half the launches, a periodic flush (cuptiPCSamplingGetData), the rest, then the capture's stop (the
    agent's last collection: GetData, then cuptiPCSamplingDisable's leftovers)."""
    t = start(built, **extra_env)
    device = DeviceActivity()

    def first() -> None:
        t.go()
        t.expect("half")

    def second(bpf: object) -> None:
        t.go()
        t.expect("done")

    try:
        return run_capture(t.pid, first, device, after_flush=second, stop=True), device
    finally:
        t.stop()


@pytest.fixture(scope="module")
def sampled(built: tuple[Path, Path]) -> tuple[Result, DeviceActivity]:
    return capture(built, DEEPCTX_PC_SAMPLING="1")


def test_layouts_match_the_header(tmp_path: Path) -> None:
    pairs: dict[str, int] = {}
    for c_name, mirror in (("pcs_record", pcs.PcsRecord), ("pcs_cubin_head", pcs.PcsCubinHead),
                           ("pcs_status", pcs.PcsStatus), ("pcs_device", pcs.PcsDevice), ("pcs_event", pcs.PcsEvent),
                           ("pcs_config", pcs.PcsConfig)):
        pairs |= struct_layout(c_name, mirror)
    pairs |= {"PCS_CHUNK": pcs.PCS_CHUNK, "PCS_DATA": pcs.PCS_DATA, "PCS_MSG_RECORDS": pcs.PCS_MSG_RECORDS,
              "PCS_MSG_NAME": pcs.PCS_MSG_NAME, "PCS_MSG_CUBIN": pcs.PCS_MSG_CUBIN, "PCS_MSG_STALL": pcs.PCS_MSG_STALL,
              "PCS_MSG_STATUS": pcs.PCS_MSG_STATUS, "PCS_MSG_DEVICE": pcs.PCS_MSG_DEVICE, "PCS_ON": pcs.PCS_ON,
              "PCS_DONE": pcs.PCS_DONE, "PCS_E_UNSUPPORTED": pcs.PCS_E_UNSUPPORTED, "PCS_E_CUPTI": pcs.PCS_E_CUPTI,
              "PCS_E_NO_API": pcs.PCS_E_NO_API}
    assert c_values(tmp_path, ['"pc_samples.h"'], list(pairs)) == list(pairs.values())


def test_every_sample_arrives_with_its_pc_and_stall_reason(sampled: tuple[Result, DeviceActivity]) -> None:
    _, device = sampled
    assert device.pcs is not None
    d = device.pcs.data
    by_name = {(d.names[n], pc, stall): v for (n, _crc, pc, stall), v in d.samples.items()}
    assert by_name == {("saxpy", 0xD0, 11): 3 * pt.N_SAXPY, ("saxpy", 0x100, 12): 1 * pt.N_SAXPY,
                       ("strided_copy", 0x250, 11): 5 * pt.N_STRIDED}
    # CUPTI's indices, with their names (the mock numbers them from 10)
    assert d.stalls[11] == "smsp__pcsamp_warps_issue_stalled_long_scoreboard"
    assert d.stalls[12] == "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle"
    totals = d.totals()
    assert totals is not None and totals.total_samples == 4 * pt.N_SAXPY + 5 * pt.N_STRIDED
    assert d.failure() is None


def test_the_sampled_cubin_arrives_whole(sampled: tuple[Result, DeviceActivity]) -> None:
    _, device = sampled
    assert device.pcs is not None
    d = device.pcs.data
    crcs = {crc for (_n, crc, _pc, _s) in d.samples}
    assert len(crcs) == 1 and crcs == set(d.cubins)
    cubin = d.cubins[crcs.pop()]
    assert cubin.complete and bytes(cubin.data) == CUBIN.read_bytes()


def test_the_device_is_read_from_the_driver(sampled: tuple[Result, DeviceActivity]) -> None:
    result, device = sampled
    assert device.pcs is not None
    assert device.pcs.data.device == {"name": "Mock H200", "sm_count": 132, "compute_capability": "9.0"}
    assert result.stats["device_sm_count"] == 132
    assert result.stats["pc_sampling_messages_lost"] == 0


def test_a_gpu_without_pc_sampling_says_so(built: tuple[Path, Path]) -> None:
    result, device = capture(built, DEEPCTX_PC_SAMPLING="1", MOCK_PCS_UNSUPPORTED="1")
    assert device.pcs is not None
    failure = device.pcs.data.failure()
    assert failure is not None and failure.code == pcs.PCS_E_UNSUPPORTED
    assert failure.text.startswith("cuptiPCSamplingEnable: ")
    assert not device.pcs.data.samples
    assert result.stats["device_records"] == pt.N_SAXPY + pt.N_STRIDED  # device activity goes on


def test_off_by_default(built: tuple[Path, Path]) -> None:
    result, device = capture(built)
    assert device.pcs is None
    assert "pc_sampling_messages" not in result.stats
    assert "on_dev_pcs" not in device.source()
    assert result.stats["device_records"] == pt.N_SAXPY + pt.N_STRIDED


@pytest.mark.skipif(sass.find_nvdisasm() is None, reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
def test_run_pc_sampling_puts_stall_reasons_on_the_launching_lines_instructions(daemon, built: tuple[Path, Path],
                                                                                 tmp_path: Path) -> None:
    """`deepctx run --pc-sampling --kernel` through deepctxd, stopped while the target lives (so its Python
    frames are named): each sample lands under the Python line that launched its kernel, on its SASS
    instruction."""
    from harness import DEEPCTX, line_of, session_of, stop_run, wait_for
    from profile_paths import walk

    agent, lib = built
    out = tmp_path / "pcs.json"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"} | {
        "DEEPCTX_SOCKET": daemon.socket, "MOCK_CUBIN": str(CUBIN), "MOCK_PCS_SAMPLES": SAMPLES}
    run = StdinTarget([*DEEPCTX, "run", "--quiet", "--mode", "exact", "--pc-sampling", "--kernel", "^saxpy$",
                       "--pc-period", "9", "-o", str(out), "--format", "json", "--", sys.executable, str(TARGET),
                       str(lib), str(agent), "--run"], env=env)
    try:
        run.go()
        run.expect("done")
        wait_for(lambda: (session_of(daemon, run.pid) or {}).get("state") == "capturing", what="capture running")
        stop_run(daemon, run)
    finally:
        run.stop()
    doc = json.loads(out.read_text())
    line = line_of(TARGET, "LINE_SAXPY")
    found = {}
    for anc, node in walk(doc):
        if node["kind"] == "gpu_instruction":
            kinds = [(a["kind"], a["name"], a["line"]) for a in anc]
            assert ("python", "main", line) in kinds and ("kernel", "saxpy", None) in kinds
            assert anc[-2]["kind"] == "gpu_function" and anc[-1]["kind"] == "gpu_line"
            found[(anc[-1]["name"], node["name"])] = {k: v for k, v in node["metrics"].items() if v}
    assert found == {
        ("pcs_kernels.cu:12", "0x00d0  LDG.E R2, desc[UR4][R2.64]"):
            {"pc_samples": 3 * pt.N_SAXPY, "stall_long_scoreboard": 3 * pt.N_SAXPY},
        ("pcs_kernels.cu:12", "0x0100  FFMA R7, R2, UR6, R7"):
            {"pc_samples": pt.N_SAXPY, "stall_math_pipe_throttle": pt.N_SAXPY},
    }
    assert doc["metrics"][6:] == ["pc_samples", "stall_long_scoreboard", "stall_math_pipe_throttle"]
    import jsonschema

    jsonschema.validate(doc, json.loads((REPO / "docs" / "profile.schema.json").read_text()))
    fns = [n for _, n in walk(doc) if n["kind"] == "gpu_function"]
    assert {(n["name"], n["registers"]) for n in fns} == {("saxpy", 10)}  # from the cubin the agent sent
    assert doc["stats"]["pc_samples_filtered"] == 5 * pt.N_STRIDED  # strided_copy: not chosen by --kernel
    assert doc["stats"]["pc_sampling_period_log2"] == 9  # the agent read DEEPCTX_PC_PERIOD
    assert doc["device"] == {"name": None, "sm_count": 132, "compute_capability": "9.0"}
    assert not [w for w in doc["warnings"] if "PC" in w or "kernel" in w], doc["warnings"]


def test_run_pc_sampling_says_when_the_regex_matches_no_kernel(daemon, built: tuple[Path, Path],
                                                               tmp_path: Path) -> None:
    from harness import DEEPCTX

    agent, lib = built
    out = tmp_path / "pcs.json"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"} | {
        "DEEPCTX_SOCKET": daemon.socket, "MOCK_CUBIN": str(CUBIN), "MOCK_PCS_SAMPLES": SAMPLES}
    r = subprocess.run([*DEEPCTX, "run", "--quiet", "--pc-sampling", "--kernel", "gemm", "-o", str(out), "--format",
                        "json", "--", sys.executable, str(TARGET), str(lib), str(agent), "--auto"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    warning = "--kernel 'gemm' matched none of the 2 kernels that ran (saxpy, strided_copy)"
    assert warning in json.loads(out.read_text())["warnings"]
    assert f"warning: {warning}" in " ".join(r.stderr.split())  # wrapped at the terminal's width


# --- deepctx attach --gpu-activity --pc-sampling: a process that started CUDA and ran its kernels before ---------


@pytest.fixture(scope="module")
def pcs_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon of the default config, which takes `attach --pc-sampling` (attach_pc_sampling)."""
    d = start_daemon(tmp_path_factory.mktemp("pcs-daemon"))
    yield d
    assert stop_daemon(d) == 0, d.log.read_text()[-4000:]


def attach_target(built: tuple[Path, Path], *extra: str) -> StdinTarget:
    """pcs_target --attach: its context made, its module loaded and N_BEFORE launches of each kernel run before
    "ready", with no agent (the attach loads it)."""
    agent, lib = built
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"} | {
        "MOCK_CUBIN": str(CUBIN), "MOCK_PCS_SAMPLES": SAMPLES}
    return StdinTarget([sys.executable, str(TARGET), str(lib), str(agent), "--attach", *extra], env=env)


def attach_pcs(daemon, t: StdinTarget, out: Path, *args: str) -> subprocess.CompletedProcess:
    """`deepctx attach --gpu-activity --pc-sampling ARGS` over one round of the target's launches, made once the
    agent reports (PC sampling is on in the context by then), and stopped while the target lives."""
    import concurrent.futures as cf

    from harness import DEEPCTX, session_of, wait_for

    from deepctx.probes.device_activity import DEV_AGENT_ACTIVE

    def agent_active() -> bool:
        s = session_of(daemon, t.pid) or {}
        return s.get("state") == "capturing" and int((s.get("stats") or {}).get("device_agent_status", 0)) == \
            DEV_AGENT_ACTIVE

    with cf.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(subprocess.run, [*DEEPCTX, "attach", str(t.pid), "--duration", "300", "--quiet", "--mode",
                                           "exact", "--gpu-activity", "--pc-sampling", "-o", str(out), "--format",
                                           "json", *args], env=daemon.env(), capture_output=True, text=True,
                          timeout=120)
        wait_for(lambda: agent_active() or fut.done(), what="the capture running, its agent reporting")
        if fut.done():
            return fut.result()
        t.go()
        t.expect("done")
        stop = daemon.cli("stop", str(t.pid))
        assert stop.returncode == 0, stop.stderr
        return fut.result()


def sampled_instructions(doc: dict) -> dict[tuple[int, str, str, str], dict[str, int]]:
    """(Python line, kernel, source line, instruction) -> the instruction's non-zero metrics."""
    from profile_paths import walk

    found = {}
    for anc, node in walk(doc):
        if node["kind"] == "gpu_instruction":
            python = [a for a in anc if a["kind"] == "python" and (a["file"] or "").endswith("pcs_target.py")]
            kernel = [a["name"] for a in anc if a["kind"] == "kernel"]
            assert python and kernel and anc[-2]["kind"] == "gpu_function" and anc[-1]["kind"] == "gpu_line"
            key = (python[-1]["line"], kernel[-1], anc[-1]["name"], node["name"])
            found[key] = {k: v for k, v in node["metrics"].items() if v}
    return found


SAXPY_SAMPLED = {
    ("pcs_kernels.cu:12", "0x00d0  LDG.E R2, desc[UR4][R2.64]"):
        {"pc_samples": 3 * pt.N_SAXPY, "stall_long_scoreboard": 3 * pt.N_SAXPY},
    ("pcs_kernels.cu:12", "0x0100  FFMA R7, R2, UR6, R7"): {"pc_samples": pt.N_SAXPY, "stall_math_pipe_throttle": pt.N_SAXPY},
}


@pytest.mark.skipif(sass.find_nvdisasm() is None, reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
def test_attach_pc_sampling_samples_kernels_of_a_context_and_module_made_before_it(pcs_daemon, built: tuple[Path, Path],
                                                                                    tmp_path: Path) -> None:
    """The agent is injected after cuInit (no CONTEXT_CREATED, no MODULE_LOADED for it to see): PC sampling is
    enabled on the active primary context and the cubin is found in the process's memory, so every sample of
    the launches made during the capture (none of the N_BEFORE before it) lands on its SASS instruction under
    the Python line that launched its kernel. Then a second attach, to the agent the first one left there,
    with --kernel: its own options, exact counts again (the agent sends names, stall reasons and the cubin
    afresh to the new capture)."""
    from harness import line_of

    t = attach_target(built)
    try:
        first = attach_pcs(pcs_daemon, t, tmp_path / "first.json")
        assert first.returncode == 0, first.stderr
        second = attach_pcs(pcs_daemon, t, tmp_path / "second.json", "--kernel", "^saxpy$", "--pc-period", "9")
        assert second.returncode == 0, second.stderr
    finally:
        t.stop()
    saxpy_line, strided_line = line_of(TARGET, "LINE_ATTACH_SAXPY"), line_of(TARGET, "LINE_ATTACH_STRIDED")
    doc = json.loads((tmp_path / "first.json").read_text())
    assert doc["stats"]["device_agent_injected"] == 1
    found = sampled_instructions(doc)
    strided = {k: v for k, v in found.items() if k[1] == "strided_copy"}
    assert {(line, ins): m for (line, kernel, ins_line, ins), m in found.items() if kernel == "saxpy"} == {
        (saxpy_line, ins): m for (_l, ins), m in SAXPY_SAMPLED.items()}
    assert [(k[0], k[3][:6], m) for k, m in strided.items()] == [
        (strided_line, "0x0250", {"pc_samples": 5 * pt.N_STRIDED, "stall_long_scoreboard": 5 * pt.N_STRIDED})]
    assert doc["stats"]["pc_samples_in_profile"] == 4 * pt.N_SAXPY + 5 * pt.N_STRIDED
    assert doc["stats"]["pc_sampling_period_log2"] == 0  # CUPTI's default: none asked
    fns = {(n["name"], n["registers"]) for _, n in __import__("profile_paths").walk(doc) if n["kind"] == "gpu_function"}
    assert ("saxpy", 10) in fns  # resources from the cubin the agent found in memory
    assert not [w for w in doc["warnings"] if "PC" in w or "cubin" in w], doc["warnings"]

    doc = json.loads((tmp_path / "second.json").read_text())
    assert doc["stats"]["device_agent_injected"] == 0  # the first capture's agent, given this capture's options
    assert doc["stats"]["pc_sampling_period_log2"] == 9  # read by the agent from what deepctxd wrote into it
    assert {(line, ins): m for (line, _k, _l, ins), m in sampled_instructions(doc).items()} == {
        (saxpy_line, ins): m for (_l, ins), m in SAXPY_SAMPLED.items()}
    assert doc["stats"]["pc_samples_filtered"] == 5 * pt.N_STRIDED  # strided_copy: not chosen by --kernel
    assert not [w for w in doc["warnings"] if "PC" in w or "cubin" in w], doc["warnings"]


def test_attach_pc_sampling_refuses_a_process_without_a_cuda_context(pcs_daemon, built: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    t = attach_target(built, "--no-init")  # libcuda loaded, cuInit never called
    try:
        r = attach_pcs(pcs_daemon, t, tmp_path / "none.json")
        assert r.returncode == 1
        assert "the process has no CUDA context yet (attach again once it has started using the GPU)" in r.stderr, \
            r.stderr
        assert pcs_daemon.alive()
        t.go()  # unharmed: it goes on
        t.expect("done")
    finally:
        t.stop()


def test_attach_pc_sampling_is_refused_where_the_config_turns_it_off(tmp_path: Path) -> None:
    (tmp_path / "deepctxd.toml").write_text("attach_pc_sampling = false\n")
    d = start_daemon(tmp_path, "--config", str(tmp_path / "deepctxd.toml"))
    try:
        r = d.cli("attach", str(os.getpid()), "--gpu-activity", "--pc-sampling", "--duration", "1")
        assert r.returncode == 1
        assert "attach --pc-sampling is off in this daemon (attach_pc_sampling = false in its config)" in \
            " ".join(r.stderr.split()), r.stderr
        assert d.alive()
    finally:
        assert stop_daemon(d) == 0
