"""PyTorch operators on the paths device activity takes (#33.1 "in every mode"): with the CUPTI agent reporting the
launches (`attach --gpu-activity`, `deepctx run`), each call's path is taken in the agent's callback. There, where
the frame-pointer walk is lost just above a GEMM library's frames, the .eh_frame walk takes over (in
on_dev_correlation_walk, by tail call), as the GPU API probes do for the calls they take. The ATen miniature of
tests/targets/ops drives the mock runtime and CUPTI; its bmm launches through a miniature cuBLASLt from code that
uses rbp for data."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness import StdinTarget, line_of, profile_phase, start_daemon, stop_daemon
from profile_paths import walk

TARGET = Path(__file__).resolve().parents[2] / "targets" / "gpu" / "ops_calls.py"
ROUNDS, BMMS, MULS = 5, 3, 4  # ops_calls.py's


def kernels_at(doc: dict, marker: str, kernel: str) -> list[tuple[list[dict], dict]]:
    line = line_of(TARGET, marker)
    return [(anc, n) for anc, n in walk(doc) if n["kind"] == "kernel" and n["name"] == kernel
            and any(a["kind"] == "python" and a["line"] == line for a in anc)]


def test_gemm_library_calls_reported_by_the_agent_reach_their_operator(
        built: tuple[Path, Path], native_targets: Path, tmp_path: Path) -> None:
    _, mocks = built
    d = start_daemon(tmp_path)
    try:
        env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
        t = StdinTarget([sys.executable, str(TARGET), str(native_targets / "torch" / "libtorch_cpu.so"),
                         str(mocks / "libcudart.so.13"), "--mock", str(mocks)], env=env)
        try:
            doc = profile_phase(d, t, "--gpu-activity")
        finally:
            t.stop()
    finally:
        assert stop_daemon(d) == 0
    assert doc["stats"]["device_agent_injected"] == 1
    bmms = kernels_at(doc, "LINE_BMM", "gemm_kernel")
    assert sum(n["metrics"]["calls"] for _, n in bmms) == ROUNDS * BMMS, [n["metrics"] for _, n in bmms]
    for anc, _ in bmms:
        kinds = [(a["kind"], a["name"]) for a in anc]
        assert [a["name"] for a in anc if a["kind"] == "op"] == ["aten::bmm"], kinds
        entry = kinds.index(("native", "at::_ops::bmm::call(long)"))  # found by the .eh_frame walk
        assert kinds[entry - 1] == ("op", "aten::bmm"), kinds
        assert ("native", "ops_bmm") in kinds[:entry], kinds  # the walk went on above the entry
        assert ("native", "cublasLtMatmul") in kinds[entry:], kinds  # the frames the frame-pointer walk kept
    # the multiplies' walks (lost in libtorch_cuda, no GEMM library's frame near) keep their operator from the
    # frames the walk kept, and are not continued: the continued walks are exactly the bmm launches'
    muls = kernels_at(doc, "LINE_MUL", "mul_kernel")
    assert sum(n["metrics"]["calls"] for _, n in muls) == ROUNDS * MULS
    assert all([a["name"] for a in anc if a["kind"] == "op"] == ["aten::mul.Tensor"] for anc, _ in muls)
    # every continued walk is one memo hit or miss; the mock announces each launch twice (its runtime call, and the
    # driver call inside it under an id of its own), and each announcement's path is taken
    stats = doc["stats"]
    assert stats["native_continue_memo_hits"] + stats["native_continue_memo_misses"] == 2 * ROUNDS * BMMS, stats
