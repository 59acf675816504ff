"""The .eh_frame continuation memoized (gpu_native_continue; native_stack_capture_memo in
probes/native_unwind.bpf.h): one lost point reached from two native caller chains whose lost frames have the same
registers (tests/targets/gpu/memo.c), so that only a return address above them tells the chains apart. Every
call is counted under its own chain, exactly; a run of calls from one chain reuses the first one's walk."""

from __future__ import annotations

import sys
from pathlib import Path

from harness import cuda_runtime, line_of, profile_in_own_daemon
from profile_paths import walk

TARGET = Path(__file__).resolve().parents[1] / "targets" / "gpu" / "memo_calls.py"
RUN_A, RUN_B, ALTERNATE = 40, 30, 20  # memo_calls.py's


def test_each_chain_keeps_its_calls_and_a_run_reuses_its_walk(tmp_path: Path, native_targets: Path) -> None:
    doc = profile_in_own_daemon(tmp_path, [sys.executable, str(TARGET), str(native_targets / "memo" / "libcublas.so"),
                                           cuda_runtime()], "gpu_native_continue = true\n")
    line = line_of(TARGET, "LINE_RUN")
    by_chain: dict[str, int] = {}
    for anc, n in walk(doc):
        if n["kind"] != "kernel" or n["name"] != "memo_kernel":
            continue
        names = [a["name"] for a in anc]
        assert names[-1] == "cudaLaunchKernel", names
        assert any(a["kind"] == "python" and a["line"] == line for a in anc), names
        # the walk was lost in memo_lost and went on above it: memo_mid, then the chain, then memo_run
        lost = names.index("memo_lost")
        chain = names[lost - 2]
        assert names[lost - 1] == "memo_mid" and names[lost - 3] == "memo_run", names
        by_chain[chain] = by_chain.get(chain, 0) + n["metrics"]["calls"]
    assert by_chain == {"memo_via_a": RUN_A + ALTERNATE // 2, "memo_via_b": RUN_B + ALTERNATE // 2}, by_chain
    stats = doc["stats"]
    # one CPU: each run's first call walks (the memo holds the other chain's walk, or none), the others reuse it;
    # the alternating calls each find the other chain's walk, whose return address above memo_mid differs
    assert stats["native_continue_memo_hits"] == (RUN_A - 1) + (RUN_B - 1), stats
    assert stats["native_continue_memo_misses"] == 2 + ALTERNATE, stats
