"""Credentials read per thread, fingerprints compared, window owners decided per window (#29 findings 3, 4)."""

from __future__ import annotations

import os
import subprocess

import pytest

from deepctx.daemon import continuous, credentials
from deepctx.daemon.credentials import Fingerprint
from deepctx.host.procfs import ProcessGone

ROOT = ((0, 0, 0, 0), (0, 0, 0, 0), 0, 0)
USER = ((1000, 1000, 1000, 1000), (1000, 1000, 1000, 1000), 0, 0)
SETUID = ((1000, 0, 0, 0), (1000, 1000, 1000, 1000), 0x1FF, 0x1FF)


def test_a_fingerprint_differs_on_credentials_or_executable_not_on_an_exit() -> None:
    before = Fingerprint(frozenset({USER}), (8, 100))
    assert not before.differs(Fingerprint(frozenset({USER}), (8, 100)))
    assert before.differs(Fingerprint(frozenset({SETUID}), (8, 100)))  # a setuid exec
    assert before.differs(Fingerprint(frozenset({USER}), (8, 101)))  # an exec of the user's own program
    assert before.differs(Fingerprint(frozenset({USER, ROOT}), (8, 100)))  # a thread with other ids
    assert not before.differs(Fingerprint(frozenset({USER}), None))  # a zombie's executable is unreadable


def test_threads_and_leader_of_a_real_process() -> None:
    me = os.getpid()
    assert credentials.tgid_of(me) == me
    ts = credentials.threads(me)
    assert ts[0].tid == me and all(t.dumpable for t in ts)
    assert ts[0].uids == (os.getuid(), os.geteuid(), os.getuid(), os.geteuid())
    with pytest.raises(ProcessGone):
        credentials.threads(2**22 + 4321)
    assert credentials.fingerprint(2**22 + 4321) is None
    p = subprocess.Popen(["sleep", "30"])
    try:
        assert credentials.fingerprint(p.pid) == credentials.fingerprint(p.pid)
        assert credentials.fingerprint(p.pid) != credentials.fingerprint(me)  # another executable
    finally:
        p.kill()
        p.wait()


def test_a_window_whose_owner_changed_is_roots(monkeypatch: pytest.MonkeyPatch) -> None:
    state = {"fp": Fingerprint(frozenset({USER}), (8, 100)), "owner": 1000}
    monkeypatch.setattr(continuous, "fingerprint", lambda pid: state["fp"])
    monkeypatch.setattr(continuous, "owner_of", lambda pid: state["owner"])
    monkeypatch.setattr(continuous, "container_of", lambda pid: "c1")
    w = continuous.WindowOwner(42)
    assert w.cut() == ("c1", 1000, "")
    state.update(fp=Fingerprint(frozenset({SETUID}), (8, 200)), owner=0)  # exec of a setuid program
    container, uid, warning = w.cut()
    assert (container, uid) == ("c1", 0) and "changed its credentials during this window" in warning
    assert w.cut() == ("c1", 0, "")  # still root's: the user may not read it
    state["fp"] = None  # gone before its last window: what the last cut read holds
    assert w.cut() == ("c1", 0, "")
