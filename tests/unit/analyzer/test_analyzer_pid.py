"""deepctx analyze PID: the capture goes through the daemon's Attach stream (here a fake daemon on a Unix
socket that answers with a recorded H200 profile), then the analyzer runs on the document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from deepctx.cli.main import main
from deepctx.proto.v1 import deepctx_pb2 as pb
from deepctx.proto.v1 import deepctx_pb2_grpc as pb_grpc


def to_message(doc: dict[str, Any]) -> pb.Profile:
    """The document flattened back into the Profile message (parents before children)."""
    msg = pb.Profile(schema=doc["schema"], pid=doc["pid"], command=doc["command"], duration_s=doc["duration_s"],
                     metrics=doc["metrics"], sample_hz=doc["sample_hz"], ended=doc["ended"],
                     started_unix=doc["started_unix"], hostname=doc["hostname"], mode=doc["mode"] or "")
    msg.stats.update(doc["stats"])
    stack: list[tuple[dict[str, Any], int]] = [(doc["root"], -1)]
    while stack:
        node, parent = stack.pop()
        n = msg.nodes.add(parent=parent, kind=node["kind"], name=node["name"],
                          metrics=[node["metrics"][m] for m in doc["metrics"]])
        for key in ("file", "line", "module", "tid", "stream"):
            if node.get(key) is not None:
                setattr(n, key, node[key])
        if node.get("grid"):
            n.grid.extend(node["grid"])
            n.block.extend(node["block"])
            n.shared_mem = node["shared_mem"]
        index = len(msg.nodes) - 1
        stack.extend((c, index) for c in reversed(node["children"]))
    return msg


class FakeDaemon(pb_grpc.ProfilerServicer):
    def __init__(self, profile: pb.Profile) -> None:
        self.profile = profile
        self.requests: list[pb.AttachRequest] = []

    def Attach(self, request: pb.AttachRequest, context: grpc.ServicerContext) -> Iterator[pb.AttachEvent]:  # noqa: N802
        self.requests.append(request)
        yield pb.AttachEvent(progress=pb.Progress(elapsed_s=0.5, duration_s=request.duration_s, samples=3))
        yield pb.AttachEvent(profile=self.profile)


@pytest.fixture()
def daemon(torch_ops: dict[str, Any], tmp_path: Path) -> Iterator[tuple[str, FakeDaemon]]:
    fake = FakeDaemon(to_message(torch_ops))
    server = grpc.server(futures.ThreadPoolExecutor(2))
    pb_grpc.add_ProfilerServicer_to_server(fake, server)
    sock = str(tmp_path / "fake.sock")
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    yield sock, fake
    server.stop(None)


def test_analyze_pid_captures_then_analyzes(daemon: tuple[str, FakeDaemon], capsys, tmp_path: Path) -> None:
    sock, fake = daemon
    saved = tmp_path / "captured.json"
    assert main(["--socket", sock, "analyze", "604", "--duration", "2.5", "--rate", "499", "--format", "json",
                 "--save", str(saved), "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [req] = fake.requests
    assert (req.pid, req.duration_s, req.sample_hz, req.python, req.gpu, req.mode) == \
        (604, 2.5, 499, pb.PYTHON_AUTO, pb.GPU_AUTO, pb.MODE_EXACT)
    assert [(f["rule"], f["location"]["line"]) for f in doc["findings"]] == [("launch-bound-loop", 19), ("fp32-gemm", 26)]
    assert "findings" not in json.loads(saved.read_text())  # --save keeps the capture as it came
