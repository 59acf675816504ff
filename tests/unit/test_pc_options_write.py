"""hand_options writes the agent's PC options only into writable memory of the process: /proc/PID/mem writes
read-only pages too, and the symbol's address comes from a file the target's owner may have chosen."""

from __future__ import annotations

import ctypes as ct
import os

import pytest

from deepctx.probes import pc_sampling as pcs

OPTIONS = pcs.PcsOptions(None, 9, 1500)


def test_the_options_land_in_writable_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = pcs.PcsConfig()
    monkeypatch.setattr(pcs, "config_address", lambda file, mappings: ct.addressof(buf))
    pcs.hand_options(os.getpid(), "agent.so", [], OPTIONS)
    assert bytes(buf) == bytes(OPTIONS.config()) and OPTIONS.config().period == 9


def test_a_symbol_in_read_only_memory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = ct.CDLL(None)
    code = ct.cast(libc.getpid, ct.c_void_p).value  # libc's text: read-only, executable
    assert code is not None
    before = ct.string_at(code, ct.sizeof(pcs.PcsConfig))
    monkeypatch.setattr(pcs, "config_address", lambda file, mappings: code)
    with pytest.raises(pcs.OldAgent, match="not in writable memory"):
        pcs.hand_options(os.getpid(), "agent.so", [], OPTIONS)
    assert ct.string_at(code, ct.sizeof(pcs.PcsConfig)) == before
