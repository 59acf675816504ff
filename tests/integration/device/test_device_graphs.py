"""CUDA graphs (#33.3), on the real CUPTI agent and BPF programs driven by the mock CUDA/CUPTI libraries: a
kernel replayed from a graph goes under the replay's path, then the path that made its node (the launch a
stream capture took), with the node's device time; the agent reports each node made and each clone that
instantiation makes, and the daemon keeps the path for the clones' records."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from capture_util import Result, run_capture
from device_paths import MOCKS
from harness import StdinTarget, line_of

from deepctx.daemon.device_tree import GRAPH_NODE_MADE
from deepctx.probes.device_activity import DeviceActivity

TARGET = Path(__file__).resolve().parent / "graph_target.py"
sys.path.insert(0, str(TARGET.parent))
import graph_target as gt  # noqa: E402

MATMUL, RELU = "mock_matmul(float*, int)", "mock_relu(float*)"


def capture(built: tuple[Path, Path], sampled: bool) -> Result:
    agent, lib = built
    t = StdinTarget([sys.executable, str(TARGET), str(lib)], env=dict(os.environ) | {"CUDA_INJECTION64_PATH": str(agent)})

    def work() -> None:
        t.go()
        t.expect("cupti")
        t.expect("done")

    try:
        if sampled:  # as `deepctx run` captures: a sample of the calls announced, launches left to the agent
            return run_capture(t.pid, work, DeviceActivity(sampling=True), gpu_mode="sampled", agent_calls=True)
        return run_capture(t.pid, work, DeviceActivity())
    finally:
        t.stop()


@pytest.fixture(scope="module", params=["exact", "sampled"])
def graphs(built: tuple[Path, Path], request: pytest.FixtureRequest) -> Result:
    """Exact, and sampled: there the calls that make graph nodes are announced as well (once each)."""
    return capture(built, request.param == "sampled")


def lines(path: list, file: str) -> list[int]:
    return [f.line for f in path if f.kind == "python" and (f.file or "").endswith(file)]


def test_replayed_kernels_go_under_the_replay_then_where_their_node_was_made(graphs: Result,
                                                                           request: pytest.FixtureRequest) -> None:
    assert MOCKS.exists()
    sampled = "sampled" in request.node.callspec.id
    replay, capture = line_of(TARGET, "LINE_REPLAY"), line_of(TARGET, "LINE_CAPTURE")
    got: dict[tuple, int] = {}
    for path, v in graphs.tree.paths_with("gpu_time_ns"):
        kinds = [(f.kind, f.name) for f in path]
        made = kinds.index(("op", GRAPH_NODE_MADE.name)) if ("op", GRAPH_NODE_MADE.name) in kinds else None
        key = (tuple(lines(path[:made], "graph_target.py")) if made is not None else None,
               tuple(lines(path[made:], "graph_target.py")) if made is not None else None, path[-1].name)
        got[key] = got.get(key, 0) + v
        if made is not None and not sampled:  # the replay's api and graph nodes above the label
            assert kinds[made - 2][0] == "api" and kinds[made - 2][1] == "cudaGraphLaunch", kinds
            assert kinds[made - 1][1].startswith("[graph 0x"), kinds
    outer = (line_of(TARGET, "LINE_MODULE"), line_of(TARGET, "LINE_MAIN"))  # both paths start there
    if sampled:  # the replay's own path is the announced call that stands for it (sampled mode's rule)
        got = {(None, below, kernel): v for (_, below, kernel), v in got.items()}
        replay_path = None
    else:
        replay_path = (*outer, replay)
    assert got == {
        (replay_path, (*outer, capture, line_of(TARGET, "LINE_MATMUL")), MATMUL): gt.N_REPLAY * gt.MATMUL_NS,
        (replay_path, (*outer, capture, line_of(TARGET, "LINE_RELU")), RELU): gt.N_REPLAY * gt.RELU_NS,
    }, (got, {k: v for k, v in graphs.stats.items() if k.startswith("device_")})  # CI once: 1 replay of 6, sampled
    s = graphs.stats
    # two nodes made in the captured launches, two clones made by the instantiation
    assert (s["device_graph_nodes"], s["device_graph_nodes_made_in_unknown_calls"]) == (4, 0), s
    assert (s["device_graph_records_under_their_node"], s["device_graph_records_without_node_path"]) == (2 * gt.N_REPLAY, 0), s
