"""`deepctx top` whose stdout is not a terminal prints one table and exits, as --once does (#34.5); Ctrl-C
while a query is in flight cancels it and exits, however long the daemon takes."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from deepctx.cli.commands import top
from deepctx.cli.main import main
from deepctx.host.signals import Interrupt, wait_in_slices
from deepctx.proto.v1 import deepctx_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_grpc import FakeCall  # noqa: E402


def reply_to(request: pb.TopRequest) -> pb.TopReply:
    reply = pb.TopReply(since_unix=request.since_unix, until_unix=request.since_unix + 300, windows=3,
                        sort="cpu_samples", kernel_sort="gpu_time_ns")
    p = reply.processes.add(host="h1", pid=4242, command="python train.py", windows=3)
    p.metrics["cpu_samples"] = 297
    return reply


class FakeTop:
    """stub.Top: the first `answered` calls are answered, later ones hang (or fail the test: `then_fail`)."""

    def __init__(self, answered: int, then_fail: bool = False) -> None:
        self.answered = answered
        self.then_fail = then_fail
        self.calls: list[FakeCall] = []
        self.hanging = threading.Event()

    def future(self, request: pb.TopRequest, timeout: float | None = None) -> FakeCall:
        assert timeout == top.QUERY_TIMEOUT_S
        assert not (self.then_fail and len(self.calls) >= self.answered), "one query too many"
        call = FakeCall(reply_to(request) if len(self.calls) < self.answered else None)
        self.calls.append(call)
        if call.reply is None:
            self.hanging.set()
        return call


class FakeStub:
    def __init__(self, answered: int, then_fail: bool = False) -> None:
        self.Top = FakeTop(answered, then_fail)  # noqa: N815 (the gRPC method's name)


def interrupt_when_hanging(fake: FakeTop) -> threading.Thread:
    """SIGINT to this process once a query hangs (the handler runs in the main thread, inside top)."""
    def send() -> None:
        if fake.hanging.wait(30):
            os.kill(os.getpid(), signal.SIGINT)
    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("args", [[], ["--interval", "0.01"]])
def test_top_prints_once_when_stdout_is_not_a_terminal(args: list[str], monkeypatch, capsys) -> None:
    stub = FakeStub(answered=1, then_fail=True)  # a second query (a live refresh) fails the test
    monkeypatch.setattr(top, "connect", lambda path: stub)
    assert main(["--socket", "/nonexistent", "top", *args]) == 0
    assert len(stub.Top.calls) == 1
    out = capsys.readouterr().out
    assert out.count("deepctx top") == 1 and "4242" in out and "train.py" in out


def test_ctrl_c_during_the_first_query_cancels_it(monkeypatch, capsys) -> None:
    stub = FakeStub(answered=0)
    monkeypatch.setattr(top, "connect", lambda path: stub)
    sender = interrupt_when_hanging(stub.Top)
    assert main(["--socket", "/nonexistent", "top", "--once"]) == 130
    sender.join(30)
    assert [c.cancelled for c in stub.Top.calls] == [True]
    assert "deepctx: interrupted" in capsys.readouterr().err


def test_ctrl_c_during_a_refresh_cancels_it_and_exits(monkeypatch) -> None:
    stub = FakeStub(answered=3)
    screen = io.StringIO()
    monkeypatch.setattr(top, "connect", lambda path: stub)
    monkeypatch.setattr(top, "view_console", lambda: Console(file=screen, force_terminal=True, width=120))
    sender = interrupt_when_hanging(stub.Top)
    assert main(["--socket", "/nonexistent", "top", "--interval", "0.01"]) == 0
    sender.join(30)
    assert [c.cancelled for c in stub.Top.calls] == [False, False, False, True]
    assert screen.getvalue().count("deepctx top") >= 3 and "4242" in screen.getvalue()


def test_the_ctrl_c_handler_runs_while_a_wait_holds_its_lock() -> None:
    """Python runs the SIGINT handler in the main thread between bytecodes, possibly inside Event.wait with the
    Event's lock held: a handler that set an Event there deadlocked (CI: top ran on 35 s after SIGINT). The
    handler only notes the interrupt, and the wait sees the note at its next slice."""
    stop = Interrupt()
    previous = signal.signal(signal.SIGINT, stop)
    try:
        wake = threading.Event()
        with wake._cond:  # as Event.wait holds it while the handler may run
            signal.raise_signal(signal.SIGINT)
        assert stop.hit
        assert wait_in_slices(stop, wake) and not wake.is_set()  # returned for the interrupt, not the event
        assert wait_in_slices(stop, seconds=30.0)  # a refresh period cut short by it
        assert stop.signum == signal.SIGINT
    finally:
        signal.signal(signal.SIGINT, previous)
