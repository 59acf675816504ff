"""Top and QueryProfile as the service answers them: visibility by caller, clean statuses for bad input."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import store_producer as sp

from deepctx.daemon import auth
from deepctx.daemon.auth import Caller
from deepctx.daemon.config import Config
from deepctx.daemon.service_store import StoreRpcs, open_store
from deepctx.profiles.document import to_doc
from deepctx.proto.v1 import deepctx_pb2 as pb

T0 = 1_800_000_000.0


class Aborted(Exception):
    pass


class Context:
    def __init__(self, peer: str) -> None:
        self._peer = peer
        self.code: grpc.StatusCode | None = None

    def peer(self) -> str:
        return self._peer

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted(details)


class Service(StoreRpcs):
    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = open_store(config)


@pytest.fixture
def service(tmp_path: Path) -> Service:
    s = Service(Config(store_path=str(tmp_path / "w.db")))
    assert s.store is not None
    for w in sp.windows(T0, 2, names=("h200_torch_ops",), uid=0) + sp.windows(T0, 2, names=("h200_jax_jit",),
                                                                                 uid=1000):
        s.store.put(w)
    return s


@pytest.fixture
def peers() -> dict[str, str]:
    names = {"root": "unix:/test/root", "user": "unix:/test/user"}
    auth.PEERS.add(names["root"], Caller(1, 0, 0, frozenset()))
    auth.PEERS.add(names["user"], Caller(2, 1000, 1000, frozenset()))
    yield names
    for p in names.values():
        auth.PEERS.remove(p)


def test_root_sees_every_window_a_user_only_theirs(service: Service, peers: dict[str, str]) -> None:
    req = pb.TopRequest(since_unix=T0, until_unix=T0 + 600)
    assert {p.pid for p in service.Top(req, Context(peers["root"])).processes} == {604, 2267}
    assert [p.pid for p in service.Top(req, Context(peers["user"])).processes] == [2267]
    q = pb.QueryProfileRequest(since_unix=T0, until_unix=T0 + 600, pid=604)
    assert service.QueryProfile(q, Context(peers["user"])).windows == 0
    reply = service.QueryProfile(q, Context(peers["root"]))
    doc = to_doc(reply.profile)
    assert (reply.windows, doc["pid"], doc["ended"]) == (2, 604, "windows")
    assert sp.totals(doc) == {k: 2 * v for k, v in sp.totals(sp.fixture("h200_torch_ops")).items()}


@pytest.mark.parametrize(("req", "code"), [
    (pb.TopRequest(since_unix=float("nan")), grpc.StatusCode.INVALID_ARGUMENT),
    (pb.TopRequest(since_unix=T0, until_unix=T0 - 1), grpc.StatusCode.INVALID_ARGUMENT),
    (pb.TopRequest(since_unix=T0, n=1001), grpc.StatusCode.INVALID_ARGUMENT),
    (pb.TopRequest(since_unix=T0, sort="bogus"), grpc.StatusCode.INVALID_ARGUMENT),
    (pb.QueryProfileRequest(since_unix=-1), grpc.StatusCode.INVALID_ARGUMENT),
    (pb.QueryProfileRequest(since_unix=T0, command="x" * 5000), grpc.StatusCode.INVALID_ARGUMENT),
])
def test_bad_requests(service: Service, peers: dict[str, str], req: object, code: grpc.StatusCode) -> None:
    ctx = Context(peers["root"])
    method = service.Top if isinstance(req, pb.TopRequest) else service.QueryProfile
    with pytest.raises(Aborted):
        method(req, ctx)
    assert ctx.code == code


def test_unknown_peer_and_no_store(tmp_path: Path, peers: dict[str, str]) -> None:
    s = Service(Config(store_path=""))
    ctx = Context("unix:/somewhere/else")
    with pytest.raises(Aborted):
        s.Top(pb.TopRequest(since_unix=T0), ctx)
    assert ctx.code == grpc.StatusCode.UNAUTHENTICATED
    ctx = Context(peers["root"])
    with pytest.raises(Aborted, match="keeps no windows"):
        s.Top(pb.TopRequest(since_unix=T0, until_unix=T0 + 600), ctx)
    assert ctx.code == grpc.StatusCode.FAILED_PRECONDITION
