"""`deepctx top` whose stdout is not a terminal prints one table and exits, as --once does (#34.5)."""

from __future__ import annotations

import threading

import pytest

from deepctx.cli.commands import top
from deepctx.cli.main import main
from deepctx.proto.v1 import deepctx_pb2 as pb


class FakeStub:
    def __init__(self) -> None:
        self.calls = 0

    def Top(self, request: pb.TopRequest) -> pb.TopReply:  # noqa: N802 (the gRPC method's name)
        self.calls += 1
        reply = pb.TopReply(since_unix=request.since_unix, until_unix=request.since_unix + 300, windows=3,
                            sort="cpu_samples", kernel_sort="gpu_time_ns")
        p = reply.processes.add(host="h1", pid=4242, command="python train.py", windows=3)
        p.metrics["cpu_samples"] = 297
        return reply


@pytest.mark.parametrize("args", [[], ["--interval", "0.01"]])
def test_top_prints_once_when_stdout_is_not_a_terminal(args: list[str], monkeypatch, capsys) -> None:
    stub = FakeStub()
    monkeypatch.setattr(top, "connect", lambda path: stub)
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(main(["--socket", "/nonexistent", "top", *args])), daemon=True)
    t.start()
    t.join(timeout=30)  # a live refresh would run until Ctrl-C: the join would time out
    assert done == [0] and stub.calls == 1
    out = capsys.readouterr().out
    assert out.count("deepctx top") == 1 and "4242" in out and "train.py" in out
