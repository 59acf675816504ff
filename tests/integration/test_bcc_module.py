"""probes/bcc_module.py: deepctx's programs are compiled into bcc modules without the rw engine (LLVM's
state freed once built), and such a module works as bcc's own: maps, a loaded and verified function, a
perf event attached, a compile error reported, the module freed."""

from __future__ import annotations

import ctypes as ct
import os

import pytest

from deepctx.probes import bcc_module, compose

PROGRAM = """
BPF_HASH(seen, u32, u64, 16);
int on_tick(void *ctx) {
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    u64 zero = 0, *n = seen.lookup_or_try_init(&pid, &zero);
    if (n)
        __sync_fetch_and_add(n, 1);
    return 0;
}
"""


def made() -> int:
    lean = bcc_module._bound(__import__("bcc").libbcc.lib)
    assert lean is not None, "libbcc does not export ebpf::BPFModule's constructor"
    return lean.made


def test_a_program_is_made_without_the_rw_engine_and_works() -> None:
    from bcc import BPF, PerfSWConfig, PerfType

    before = made()
    bpf = compose.compile_text(PROGRAM, [])
    try:
        assert made() == before + 1
        seen = bpf[b"seen"]
        seen[seen.Key(7)] = seen.Leaf(41)  # maps: ctypes types from the module's descriptions
        assert seen[seen.Key(7)].value == 41
        fn = bpf.load_func(b"on_tick", BPF.PERF_EVENT)  # the verifier accepts the copied instructions
        assert fn.fd >= 0
        bpf.attach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK, fn_name=b"on_tick",
                              sample_freq=999, pid=os.getpid(), cpu=-1)
        deadline_spins = 0
        while not seen.get(seen.Key(os.getpid())) and deadline_spins < 200_000_000:
            deadline_spins += 1  # burn CPU until a clock tick of this process ran the program
        assert seen[seen.Key(os.getpid())].value >= 1
    finally:
        compose.cleanup_program(bpf)


def test_a_compile_error_is_an_exception_and_makes_no_module(capfd: pytest.CaptureFixture[str]) -> None:
    before = made()
    with pytest.raises(Exception, match="Failed to compile BPF module"):
        compose.compile_text("int broken(void *ctx) { return undeclared_name; }", [])
    assert made() == before
    assert "undeclared_name" in capfd.readouterr().err  # clang's message, as bcc prints it


def test_the_std_string_passed_holds_the_text() -> None:
    keep: list = []
    s = bcc_module._std_string(b"abc\0def", keep)
    assert s.size == 7 and ct.string_at(s.data, 7) == b"abc\0def"
    empty = bcc_module._std_string(b"", keep)
    assert empty.size == 0 and empty.data == ct.addressof(empty) + bcc_module._StdString.local.offset


def test_a_libbcc_without_the_class_leaves_bcc_as_it_is(monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(bcc_module, "_checked", False)
    monkeypatch.setattr(bcc_module, "_lean", None)

    class OtherAbi:  # a libbcc built with the old std::string ABI: other mangled names
        bpf_module_destroy = None

    with caplog.at_level("INFO", logger="deepctx.programs"):
        assert bcc_module._bound(OtherAbi()) is None
    assert "bcc modules keep their rw engine" in caplog.text and bcc_module._CTOR in caplog.text
