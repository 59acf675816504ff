"""`deepctx attach --gpu-activity --pc-sampling` on a GPU host (root): a planted kernel of
examples/inefficiencies/kernels/planted.cu (long-scoreboard's sum_dependent) runs in a process that started
CUDA, loaded its module and ran its warm-up launches before the capture (it prints "ready" once they are
synchronized); the attach loads the agent (ptrace), which enables PC sampling on the process's active primary
context and finds the kernel's cubin in the process's memory (libplanted.so's fatbin: nvcc compresses no cubin
by default), so the samples of the timed run land under the example's marked line, on planted.cu's source lines
and SASS instructions, with their stall reasons; and long-scoreboard fires there, as it does under `deepctx run
--pc-sampling` (test_planted_kernels.py).

Needs nvcc (CUDA_HOME, default /usr/local/cuda) to build the planted kernels. With $DEEPCTX_ARTIFACTS, the
profile is written there (attach_pc_sampling.json.xz)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Daemon, StdinTarget, line_of, session_of, start_daemon, stop_daemon, wait_for
from profile_paths import walk

from deepctx.profiles.analyzer import Limits, annotate

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "inefficiencies"
SCRIPT = EXAMPLES / "long_scoreboard.py"
KERNEL = "sum_dependent"
AGENT_ACTIVE = 1  # DEV_AGENT_ACTIVE (probes/device_activity.py): the agent reports, PC sampling on by then
SASS = re.compile(r"^0x[0-9a-f]{4,}  \S")  # "0x00d0  LDG.E ...": an offset and its instruction (bare: no cubin)


@pytest.fixture(scope="module")
def built() -> None:
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if not shutil.which("nvcc") and not Path(cuda, "bin", "nvcc").exists():
        pytest.skip(f"nvcc not found (PATH, {cuda}/bin): the planted kernels cannot be built")
    subprocess.run(["make", "-s", "-C", str(EXAMPLES / "kernels"), f"CUDA_HOME={cuda}"], check=True)
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), f"PYTHON={sys.executable}"], check=True)
    assert (REPO / "native" / "build" / "libdeepctx_cupti.so").exists(), "the CUPTI agent was not built"


def kept(tmp: Path) -> Path:
    """Where the daemon's log and the target's stderr go: $DEEPCTX_ARTIFACTS when set (they come back from the
    GPU host, a failure's cause with them), else the test's own folder."""
    art = os.environ.get("DEEPCTX_ARTIFACTS")
    folder = Path(art) / "attach_pc_sampling" if art else tmp
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def pcs_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon of the default config, which takes `attach --pc-sampling` (attach_pc_sampling)."""
    home = tmp_path_factory.mktemp("pcs-daemon")  # short: the socket's path is limited
    d = start_daemon(home, "--log-level", "debug")
    try:
        yield d
    finally:
        rc = stop_daemon(d)
        shutil.copy(d.log, kept(home) / "deepctxd.log")
    assert rc == 0, d.log.read_text()[-4000:]


def attached(daemon: Daemon, out: Path) -> tuple[subprocess.CompletedProcess, float]:
    """The example started without the agent, attached once its warm-up ran, one timed run captured (started
    once the agent reports), the capture stopped while the example lives: the CLI's result and the run's time."""
    # the agent's steps, timed, on the target's stderr (kept): where a start that never reports stops
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"} | {"DEEPCTX_AGENT_TIMING": "1"}
    with open(kept(out.parent) / "target.stderr", "w") as err:  # "ready": warm-up synchronized
        t = StdinTarget([sys.executable, str(SCRIPT), "--steps", "400"], env=env, stderr=err)

    def agent_reports() -> bool:
        s = session_of(daemon, t.pid) or {}
        return s.get("state") == "capturing" and int((s.get("stats") or {}).get("device_agent_status", 0)) == \
            AGENT_ACTIVE

    try:
        with cf.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(daemon.cli, "attach", str(t.pid), "--duration", "300", "--quiet", "--mode", "exact",
                              "--gpu-activity", "--pc-sampling", "--pc-duration", "120", "-o", str(out), "--format",
                              "json", timeout=600)
            try:
                wait_for(lambda: agent_reports() or fut.done(), what="the capture running, its agent reporting",
                         timeout=90)
            except AssertionError as e:
                session = session_of(daemon, t.pid)
                daemon.cli("stop", str(t.pid))  # the capture ends now: the pool's exit does not wait out 300 s
                raise AssertionError(f"{e}: {session}") from None
            if fut.done():
                return fut.result(), 0.0
            t.go()
            seconds = float(t.expect("done").split()[1])
            stop = daemon.cli("stop", str(t.pid))
            assert stop.returncode == 0, stop.stderr
            return fut.result(), seconds
    finally:
        t.stop()


def kernel_samples(doc: dict[str, Any], line: int) -> dict[tuple[str, str], dict[str, int]]:
    """(source line, instruction) -> metrics of the instructions sampled in KERNEL under the example's line."""
    out: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for anc, node in walk(doc):
        if node["kind"] != "gpu_instruction":
            continue
        at_line = any(a["kind"] == "python" and a["file"] and Path(a["file"]).resolve() == SCRIPT.resolve()
                      and a["line"] == line for a in anc)
        if at_line and any(a["kind"] == "kernel" and KERNEL in a["name"] for a in anc):
            assert [a["kind"] for a in anc[-2:]] == ["gpu_function", "gpu_line"], [a["kind"] for a in anc]
            for k, v in node["metrics"].items():
                out[(anc[-1]["name"], node["name"])][k] += v
    return out


def test_attach_samples_a_running_kernel_under_the_line_that_launched_it(pcs_daemon: Daemon, built: None,
                                                                           tmp_path: Path) -> None:
    r, seconds = attached(pcs_daemon, tmp_path / "attach.json")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "attach.json").read_text())
    if os.environ.get("DEEPCTX_ARTIFACTS"):
        Path(os.environ["DEEPCTX_ARTIFACTS"]).mkdir(parents=True, exist_ok=True)
        with lzma.open(Path(os.environ["DEEPCTX_ARTIFACTS"]) / "attach_pc_sampling.json.xz", "wt") as f:
            json.dump(doc, f, separators=(",", ":"))
    stats = doc["stats"]
    assert doc["ended"] == "stopped" and seconds > 0
    assert stats["device_agent_injected"] == 1  # loaded by this attach: CUDA and the module came before it
    assert stats["pc_sampling_samples"] > 0, doc["warnings"]
    assert stats["pc_sampling_messages_lost"] == 0
    assert doc["device"]["sm_count"] > 0
    # no sampling that failed or never started, no cubin missing (its lines and SASS would be unknown)
    assert not [w for w in doc["warnings"] if "PC sampl" in w or "cubin" in w], doc["warnings"]

    sampled = kernel_samples(doc, line_of(SCRIPT, "LINE_LONG_SCOREBOARD"))
    assert sampled, f"no {KERNEL} samples under {SCRIPT.name}'s marked line"
    # the cubin came (found in memory): every sampled PC is one of its SASS instructions, and the hottest source
    # line is planted.cu's (-lineinfo; an instruction the compiler gave no line is "[no line info]")
    assert all(SASS.match(ins) for _, ins in sampled), sorted(ins for _, ins in sampled)[:5]
    by_line: dict[str, int] = defaultdict(int)
    for (src, _ins), metrics in sampled.items():
        by_line[src] += metrics.get("pc_samples", 0)
    assert max(by_line, key=by_line.__getitem__).startswith("planted.cu:"), dict(by_line)
    stalls: dict[str, int] = defaultdict(int)
    for metrics in sampled.values():
        for k, v in metrics.items():
            if k.startswith("stall_") and not k.endswith("_not_issued"):
                stalls[k] += v
    total = sum(m.get("pc_samples", 0) for m in sampled.values())
    assert total > 0 and sum(stalls.values()) == total  # each sample has its one stall reason
    # sum_dependent's warps wait on their loads: the planted stall leads, as the rule's 30% asks
    assert max(stalls, key=stalls.__getitem__) == "stall_long_scoreboard", dict(stalls)
    assert stalls["stall_long_scoreboard"] >= 0.3 * total, dict(stalls)

    annotate(doc, Limits(min_speedup=1.0))  # the whole-run estimate is near 1.0x around a short run
    line = line_of(SCRIPT, "LINE_LONG_SCOREBOARD")
    found = [f for f in doc.get("findings", []) if f["rule"] == "long-scoreboard" and f["location"]["file"]
             and Path(f["location"]["file"]).resolve() == SCRIPT.resolve() and f["location"]["line"] == line]
    assert found, [(f["rule"], f["location"]) for f in doc.get("findings", [])]
    assert found[0]["evidence"]["kernel_line"].startswith("planted.cu:")
