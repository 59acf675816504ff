"""Stand-ins for a gRPC stub's unary methods, for the CLI's unit tests: the call, and the future that
`method.future(request, timeout=...)` returns, answered at once or never (a daemon that does not answer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class FakeCall:
    """A grpc.Future: answered at once (reply), or never until cancelled (None)."""

    def __init__(self, reply: Any | None) -> None:
        self.reply = reply
        self.cancelled = False

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        if self.done():  # a call that never ends never calls back
            fn(self)

    def done(self) -> bool:
        return self.reply is not None or self.cancelled

    def cancel(self) -> bool:
        self.cancelled = True
        return True

    def result(self) -> Any:
        assert self.reply is not None, "result() of a call that never ended"
        return self.reply


class Unary:
    """stub.Method: callable, and with .future(), both answered by fn."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, request: Any, timeout: float | None = None) -> Any:
        return self.fn(request)

    def future(self, request: Any, timeout: float | None = None) -> FakeCall:
        return FakeCall(self.fn(request))
