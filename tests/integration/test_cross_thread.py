"""Cross-thread context on the real CUDA runtime, without a GPU: a C thread pool's workers launch after
a hand-off from Python, and the launches are charged to the Python line that handed the work off."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from harness import StdinTarget, capture_started, line_of, profile_phase, start_daemon, stop_daemon
from profile_paths import walk

TARGET = Path(__file__).resolve().parents[1] / "targets" / "gpu" / "handoff_calls.py"
ROUNDS, PER_ROUND = 6, 5


@pytest.fixture(scope="module")
def handoff_daemon(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("handoff")
    cfg = tmp / "d.toml"
    cfg.write_text('[[handoff_points]]\nlibrary = "^libhandoff\\\\.so$"\nsymbol = "handoff_run"\nlabel = "[test pool]"\n')
    d = start_daemon(tmp, "--config", str(cfg))
    yield d
    assert stop_daemon(d) == 0


def test_worker_launches_under_the_handing_off_line(handoff_daemon, native_targets: Path) -> None:
    from test_gpu_api_cpu import cuda_runtime

    t = StdinTarget([sys.executable, str(TARGET), str(native_targets / "libhandoff.so"), cuda_runtime()])
    try:
        doc = profile_phase(handoff_daemon, t)
    finally:
        t.stop()
    line = line_of(TARGET, "LINE_HANDOFF")
    kernels = [(anc, n) for anc, n in walk(doc) if n["kind"] == "kernel" and n["name"] == "handoff_kernel_stub"]
    assert sum(n["metrics"]["calls"] for _, n in kernels) == ROUNDS * PER_ROUND
    for anc, _ in kernels:
        kinds = [(a["kind"], a["name"]) for a in anc]
        # origin thread (the Python main thread) -> ... -> the line -> handoff_run -> [test pool] -> worker
        assert anc[0]["kind"] == "thread" and anc[0]["tid"] == t.pid, kinds
        py = [i for i, a in enumerate(anc) if a["kind"] == "python" and a["line"] == line]
        op = [i for i, a in enumerate(anc) if a == {**a, "kind": "op", "name": "[test pool]"}]
        workers = [i for i, a in enumerate(anc) if a["kind"] == "thread" and a["name"] == "handoff-wk"]
        run = [i for i, a in enumerate(anc) if a["name"] == "handoff_run"]
        assert len(py) == 1 and len(op) == 1 and len(workers) == 1 and run, kinds
        assert py[0] < run[0] < op[0] < workers[0], kinds
        assert anc[workers[0]]["tid"] != t.pid
        assert anc[-1] == {**anc[-1], "kind": "api", "name": "cudaLaunchKernel"}
        assert "run_task" in [a["name"] for a in anc[workers[0]:]]
    assert doc["stats"]["gpu_handoffs"] == ROUNDS
    assert doc["stats"]["gpu_calls_handed_off"] == ROUNDS * PER_ROUND
    assert not [w for w in doc["warnings"] if "hand-off point" in w]


NODES_TARGET = TARGET.parent / "nodes_calls.py"
NODE_ROUNDS = 4


@pytest.fixture(scope="module")
def nodes_daemon(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("nodes")
    cfg = tmp / "d.toml"
    cfg.write_text(
        '[[handoff_points]]\nlibrary = "^libnodes\\\\.so$"\nsymbol = "nodes_backward"\nlabel = "[demo backward]"\n'
        '[[handoff_points]]\nlibrary = "^libnodes\\\\.so$"\nsymbol = "_ZN4demo8next_seqEv"\nlabel = "[node]"\n'
        'role = "node_created"\n'
        '[[handoff_points]]\nlibrary = "^libnodes\\\\.so$"\nsymbol = "_ZN4demo6Engine8evaluateE*"\n'
        'label = "[backward of {node}]"\nrole = "node_run"\nnode_arg = 2\nnode_seq_offset = 24\n')
    d = start_daemon(tmp, "--config", str(cfg))
    yield d
    assert stop_daemon(d) == 0


def test_backward_node_launches_under_the_forward_line(nodes_daemon, native_targets: Path) -> None:
    """Each node's launches, made on the backward worker, sit under the Python line that created the node,
    below an op frame that names the node's C++ class; the worker's own frames follow."""
    from test_gpu_api_cpu import cuda_runtime

    t = StdinTarget([sys.executable, str(NODES_TARGET), str(native_targets / "libnodes.so"), cuda_runtime()])
    try:
        doc = profile_phase(nodes_daemon, t)
    finally:
        t.stop()
    want = {"matmul_backward_kernel": (line_of(NODES_TARGET, "LINE_MATMUL"), "[backward of MatmulBackward]", 2),
            "relu_backward_kernel": (line_of(NODES_TARGET, "LINE_RELU"), "[backward of ReluBackward]", 1)}
    lost = 0  # calls whose native stack BPF could not read (counted in gpu_api_stacks_lost; seen once in CI)
    for kernel, (line, label, per_node) in want.items():
        found = [(anc, n) for anc, n in walk(doc) if n["kind"] == "kernel" and n["name"] == kernel]
        assert sum(n["metrics"]["calls"] for _, n in found) == NODE_ROUNDS * per_node, kernel
        for anc, n in found:
            kinds = [(a["kind"], a["name"]) for a in anc]
            op = [i for i, a in enumerate(anc) if a["kind"] == "op"]
            assert len(op) == 1 and anc[op[0]]["name"] == label, kinds
            # the creating line is the innermost frame before the op: the forward's native bookkeeping is cut
            assert anc[op[0] - 1]["kind"] == "python" and anc[op[0] - 1]["line"] == line, kinds
            assert anc[0]["kind"] == "thread" and anc[0]["tid"] == t.pid, kinds
            assert anc[op[0] + 1]["kind"] == "thread" and anc[op[0] + 1]["name"] == "nodes-bwd", kinds
            node_class = label.removeprefix("[backward of ").removesuffix("]")
            if "[lost user stack]" in [a["name"] for a in anc]:  # the worker's native frames alone are missing
                lost += n["metrics"]["calls"]
                continue
            assert f"demo::{node_class}::apply()" in [a["name"] for a in anc[op[0]:]], kinds
    stats = doc["stats"]
    assert lost <= stats["gpu_api_stacks_lost"] and lost < NODE_ROUNDS, (lost, stats["gpu_api_stacks_lost"])
    assert stats["autograd_nodes_created"] == 2 * NODE_ROUNDS
    assert stats["autograd_nodes_run_with_creator"] == 2 * NODE_ROUNDS
    assert stats["autograd_nodes_run_without_creator"] == 0
    assert stats["gpu_calls_charged_to_node_creator"] == 3 * NODE_ROUNDS
    assert stats["gpu_calls_handed_off"] == 0  # charged to the node's creator, not to the hand-off call
    assert not [w for w in doc["warnings"] if "hand-off point" in w], doc["warnings"]


LATE_TARGET = TARGET.parent / "late_named_thread.py"


def test_a_thread_named_after_the_capture_listed_it_has_the_name_it_launched_under(handoff_daemon) -> None:
    """The capture lists the target's threads as it goes live, with the worker not yet named (the
    name of its process); the worker names itself, launches and exits before the capture ends: its
    launches sit under the name it had when it made them."""
    from test_gpu_api_cpu import cuda_runtime

    t = StdinTarget([sys.executable, str(LATE_TARGET), cuda_runtime()])
    worker = int(t.first.split()[2])
    try:
        doc = profile_phase(handoff_daemon, t)
    finally:
        t.stop()
    kernels = [(anc, n) for anc, n in walk(doc) if n["kind"] == "kernel"]
    threads = {(a["tid"], a["name"]) for anc, _ in kernels for a in anc if a["kind"] == "thread"}
    assert threads == {(worker, "late-named (Thread-1 (work))")}, threads  # OS name (Python name)
    assert sum(n["metrics"]["calls"] for _, n in kernels) == 3


def test_a_tid_reused_by_another_process_launches_under_its_own_name(handoff_daemon) -> None:
    """Captures at once share one loaded program and its maps (a third capture holds it throughout, as
    continuous mode's do). A thread of a first target names itself, launches and exits; a thread of a second
    target gets the same tid, names itself otherwise, launches and exits. Each thread's launches sit under its
    own name, not under the one the program recorded for the tid's first holder."""
    import concurrent.futures as cf

    from test_gpu_api_cpu import cuda_runtime

    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("needs root in the initial pid namespace to choose a thread's tid")
    keeper = StdinTarget([sys.executable, str(LATE_TARGET), cuda_runtime(), "keeper"])
    names = []
    tid = 0
    try:
        with cf.ThreadPoolExecutor(1) as pool:
            kept = capture_started(pool, handoff_daemon, keeper)
            for name in ("first-holder", "second-holder"):
                argv = [sys.executable, str(LATE_TARGET), cuda_runtime(), name, *([str(tid)] if tid else [])]
                t = StdinTarget(argv)
                worker = int(t.first.split()[2])
                assert not tid or worker == tid, (worker, tid)
                tid = worker
                try:
                    doc = profile_phase(handoff_daemon, t)
                finally:
                    t.stop()
                assert doc["stats"]["program_captures"] == 2, doc["stats"]  # its own and the keeper's
                kernels = [anc for anc, n in walk(doc) if n["kind"] == "kernel"]
                # the OS name, before the Python one in brackets (the second target may have made several threads)
                names.append({(a["tid"], a["name"].split(" (")[0]) for anc in kernels for a in anc
                              if a["kind"] == "thread"})
            keeper.go()
            keeper.expect("done")
            assert handoff_daemon.cli("stop", str(keeper.pid)).returncode == 0
            kept_doc = kept.result()
    finally:
        keeper.stop()
    assert names == [{(tid, "first-holder")}, {(tid, "second-holder")}], names
    keeper_threads = {a["name"].split(" (")[0] for anc, n in walk(kept_doc) if n["kind"] == "kernel" for a in anc
                      if a["kind"] == "thread"}
    assert keeper_threads == {"keeper"}, keeper_threads  # the others' threads are not the keeper's
