"""probes/programs.py: a program is compiled and loaded once and handed from capture to capture (#30.1), and
what a capture asks for does not change the program's text (it goes into maps)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from deepctx.daemon.capture import CaptureOptions
from deepctx.daemon.probe_set import ProbeSet
from deepctx.daemon.symbolize.native import SymbolCache
from deepctx.probes.device_activity import DeviceActivity
from deepctx.probes.native_unwind import NativeUnwinder, size_class
from deepctx.probes.program_cache import ProgramCache
from deepctx.probes.programs import ProgramPool, program_key


class FakeBpf:
    """What the pool reads of a bcc program: its loaded functions and its open events."""

    def __init__(self) -> None:
        self.funcs: dict[bytes, object] = {}
        self.open_perf_events: dict[Any, Any] = {}
        self.freed = False


class Fam:
    """A family whose text is its name and whose program has one function."""

    def __init__(self, name: str, define: int = 1) -> None:
        self.name, self.define = name, define

    def source(self) -> str:
        return f"/* {self.name} */"

    def defines(self) -> dict[str, int | str]:
        return {f"{self.name.upper()}_ENTRIES": self.define}

    def load(self, bpf: Any) -> None:
        bpf.funcs[f"on_{self.name}".encode()] = object()


def pool(**kw: Any) -> tuple[ProgramPool, list[FakeBpf]]:
    made: list[FakeBpf] = []

    def compile_fn(families: Sequence[Any]) -> FakeBpf:
        made.append(FakeBpf())
        return made[-1]

    def free(bpf: FakeBpf) -> None:
        bpf.freed = True

    p = ProgramPool(compile_fn=compile_fn, free_fn=free, **kw)
    return p, made


@pytest.fixture(autouse=True)
def no_map_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("deepctx.probes.programs.reset_maps", lambda bpf: None)  # fake programs have no maps


def test_a_second_capture_compiles_and_loads_nothing() -> None:
    p, made = pool()
    fams = [Fam("cpu")]
    first = p.acquire(fams)
    assert (p.counters.compiled, p.counters.loaded) == (1, 1)
    p.release(first)
    second = p.acquire([Fam("cpu")])  # another capture's own family objects, the same text
    assert second is first and len(made) == 1
    assert p.totals() == {"bpf_programs_built": 1, "bpf_programs_compiled": 1, "bpf_programs_from_disk": 0,
                          "bpf_programs_loaded": 1, "bpf_programs_reused": 1, "bpf_programs_discarded": 0,
                          "bpf_programs_shared": 0, "captures_served": 2, "bpf_programs_idle": 0,
                          "bpf_programs_building": 0, "bpf_programs_cached": 0, "bpf_programs_cache_refused": 0}


class Refusing(Fam):
    """The kernel refuses a program loaded from the disk cache (its functions are the file's)."""

    def load(self, bpf: Any) -> None:
        if hasattr(bpf, "deepctx_code"):
            raise OSError("Failed to load BPF program b'on_cpu': Permission denied")
        super().load(bpf)


def test_a_cached_program_the_kernel_refuses_is_compiled_and_not_loaded_from_disk_again() -> None:
    made: list[FakeBpf] = []

    def compile_fn(families: Sequence[Any]) -> FakeBpf:
        bpf = FakeBpf()
        if cache.load("k") is not None:  # what compose.compile_program does with a file under the key
            bpf.deepctx_code, bpf.deepctx_cache_key = {}, "k"  # type: ignore[attr-defined]
        made.append(bpf)
        return bpf

    cache = ProgramCache(None)
    cache.load = lambda key: None if key in cache._refused else object()  # type: ignore[method-assign]
    p = ProgramPool(compile_fn=compile_fn, free_fn=lambda bpf: setattr(bpf, "freed", True), cache=cache)
    prog = p.acquire([Refusing("cpu")])
    assert [hasattr(b, "deepctx_code") for b in made] == [True, False] and made[0].freed and prog.bpf is made[1]
    t = p.totals()
    assert (t["bpf_programs_compiled"], t["bpf_programs_from_disk"], t["bpf_programs_cache_refused"]) == (1, 0, 1)
    p.release(prog)
    p.close()
    p.acquire([Fam("cpu")])  # the next program of the key is compiled as well
    assert [hasattr(b, "deepctx_code") for b in made] == [True, False, False]


def test_programs_of_other_text_or_sizes_are_other_programs() -> None:
    p, made = pool()
    a = p.acquire([Fam("cpu")])
    p.release(a)
    b = p.acquire([Fam("cpu", define=2)])  # the daemon's map sizes are in the text's flags
    c = p.acquire([Fam("python"), Fam("cpu")])
    assert len({id(a), id(b), id(c)}) == 3 and p.counters.compiled == 3 and p.counters.reused == 0


def test_captures_at_once_get_programs_of_their_own() -> None:
    """Maps are not shared: two captures at once, two programs (the second compiled)."""
    p, _ = pool()
    a, b = p.acquire([Fam("cpu")]), p.acquire([Fam("cpu")])
    assert a is not b and p.counters.compiled == 2
    p.release(a)
    p.release(b)  # one idle program of a kind is kept: a second only holds its maps' kernel memory
    assert a.bpf.freed and not b.bpf.freed and p.totals()["bpf_programs_idle"] == 1 and p.counters.discarded == 1
    assert p.acquire([Fam("cpu")]) is b and p.counters.compiled == 2


def test_a_program_still_attached_or_not_detached_cleanly_is_freed() -> None:
    p, made = pool()
    a = p.acquire([Fam("cpu")])
    a.bpf.open_perf_events[(1, 0)] = object()  # a perf event its family left open
    p.release(a)
    b = p.acquire([Fam("cpu")])
    p.release(b, reusable=False)  # a detach failed
    assert made[0].freed and made[1].freed and p.counters.discarded == 2
    assert p.acquire([Fam("cpu")]).bpf is made[2]


def test_idle_programs_beyond_the_cap_are_freed_least_recently_used_first() -> None:
    p, made = pool(max_idle=2)
    progs = [p.acquire([Fam(f"f{i}")]) for i in range(3)]
    for prog in progs:
        p.release(prog)
    assert [b.freed for b in made] == [True, False, False] and p.totals()["bpf_programs_idle"] == 2


def test_a_capture_waits_for_a_program_being_given_back_rather_than_compiling() -> None:
    p, made = pool(wait_s=60)
    a = p.acquire([Fam("cpu")])
    p.releasing(a)  # the first capture is detaching behind its profile
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(p.acquire([Fam("cpu")])))
    t.start()
    p.release(a)
    t.join(60)
    assert got == [a] and len(made) == 1


def test_a_capture_that_is_ending_waits_no_longer() -> None:
    """The daemon stops while a capture waits for a program being given back: it compiles its own at once
    rather than holding the shutdown for up to WAIT_S."""
    p, made = pool(wait_s=3600)
    a = p.acquire([Fam("cpu")])
    p.releasing(a)  # never given back in this test
    b = p.acquire([Fam("cpu")], give_up=lambda: True)
    assert b is not a and len(made) == 2


def test_a_prewarmed_program_serves_the_first_capture() -> None:
    p, made = pool()
    p.prewarm([Fam("cpu")])
    assert (p.counters.compiled, p.counters.loaded, p.totals()["bpf_programs_idle"]) == (1, 1, 1)
    assert p.acquire([Fam("cpu")]).bpf is made[0] and p.counters.compiled == 1 and p.counters.reused == 1


def test_close_frees_idle_programs() -> None:
    p, made = pool()
    p.release(p.acquire([Fam("cpu")]))
    p.close()
    assert made[0].freed


def opts(**kw: Any) -> CaptureOptions:
    return CaptureOptions(duration_s=1.0, sample_hz=99, **kw)


@pytest.mark.parametrize("other", [
    {"sample_hz": 999}, {"kernel_stacks": True}, {"gpu_mode": "sampled"}, {"gpu": "on"}, {"duration_s": 60.0},
    {"native_python": True}, {"gpu_duty": 0.1, "gpu_duty_period_s": 2.0}, {"autograd_nodes": False},
])
def test_what_a_capture_asks_for_leaves_the_program_text_alone(other: dict[str, Any]) -> None:
    """Rates, kernel stacks, GPU modes, durations, duty cycles: each goes into maps or user space, so the
    programs that captures asking for either take are one program."""
    base = {"duration_s": 1.0, "sample_hz": 99}
    a = ProbeSet.common_programs(opts(), SymbolCache(4), object())
    b = ProbeSet.common_programs(CaptureOptions(**{**base, **other}), SymbolCache(4), object())
    assert [program_key(f) for f in a] == [program_key(f) for f in b]


def test_trace_mode_is_a_setting_of_the_device_program() -> None:
    """Trace mode used to compile the ring buffer in (-DDEV_TRACE): now dev_config.trace says so."""
    assert DeviceActivity(trace=True).defines() == DeviceActivity(trace=False).defines()
    assert DeviceActivity(trace=True).source() == DeviceActivity(trace=False).source()


def test_unwind_tables_are_sized_by_power_of_two_classes() -> None:
    """Processes of one program need the same rows, and a program loaded before any target fits the
    processes that need less than min_rows (a PyTorch process with CUDA: 8.7 to 9.4 M on the H200 host)."""
    assert [size_class(n) for n in (1, 2, 3, 1000, 1 << 20, (1 << 20) + 1)] == [1, 2, 4, 1024, 1 << 20, 1 << 21]
    unwinder = NativeUnwinder(cache=object())  # type: ignore[arg-type]
    rows = unwinder.defines()["NATIVE_MAX_ROWS"]
    assert rows == unwinder.config.min_rows == 1 << 24 > 9_400_000 + unwinder.config.rows_headroom


def test_map_memory_sums_the_memlock_of_bpf_map_descriptors(tmp_path: Path) -> None:
    """Only descriptors of BPF maps count, each by the memlock its fdinfo gives; a descriptor closed between
    the listing and the read is skipped."""
    from deepctx.probes.programs import map_memory

    (tmp_path / "fd").mkdir()
    (tmp_path / "fdinfo").mkdir()
    links = {"3": "anon_inode:bpf-map", "4": "anon_inode:bpf-prog", "5": "anon_inode:bpf-map", "6": "/dev/null",
             "7": "anon_inode:bpf-map"}
    for fd, target in links.items():
        (tmp_path / "fd" / fd).symlink_to(target)
    (tmp_path / "fdinfo" / "3").write_text("pos:\t0\nmap_type:\t2\nmax_entries:\t16777216\nmemlock:\t134221824\n")
    (tmp_path / "fdinfo" / "4").write_text("memlock:\t4096\n")
    (tmp_path / "fdinfo" / "5").write_text("map_type:\t1\nmemlock:\t65536\n")
    # 7: no fdinfo (closed meanwhile)
    assert map_memory(str(tmp_path)) == {"bpf_maps": 2, "bpf_map_bytes": 134221824 + 65536}
    assert map_memory(str(tmp_path / "gone")) == {"bpf_maps": 0, "bpf_map_bytes": 0}


def test_captures_of_one_share_key_attach_to_one_program_and_its_last_release_empties_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Continuous mode's captures at once (probes/program_share.py): the second joins the first one's program
    (compiles nothing), a release leaves it to the others, and only the last one's empties it for the pool."""
    resets: list[object] = []
    monkeypatch.setattr("deepctx.probes.programs.reset_maps", resets.append)
    p, made = pool()
    a = p.acquire([Fam("cpu")], share_key="k")
    b = p.acquire([Fam("cpu")], share_key="k")
    assert b is a and len(made) == 1 and a.holders == 2
    other = p.acquire([Fam("cpu")], share_key="k2")  # other settings: a program of its own
    alone = p.acquire([Fam("cpu")])  # no share key (a one-shot attach): never joins
    assert len({id(x) for x in (a, other, alone)}) == 3 and len(made) == 3
    a.share.join(11)
    a.share.perf_users = 2
    p.releasing(a)  # another capture holds it: nothing waits for it
    p.release(a)
    assert resets == [] and a.holders == 1 and p.totals()["bpf_programs_idle"] == 0
    c = p.acquire([Fam("cpu")], share_key="k")  # still in use: joined again
    assert c is a and p.counters.shared == 2
    p.release(a)
    p.releasing(a)
    p.release(a)
    assert resets == [a.bpf] and a.holders == 0 and p.totals()["bpf_programs_idle"] == 1
    assert (a.share.users, a.share.perf_users) == (set(), 0)  # the share starts again with the maps
    assert p.acquire([Fam("cpu")], share_key="k") is a  # idle now: taken, and joined by the next
    assert p.acquire([Fam("cpu")], share_key="k") is a and len(made) == 3
    assert p.totals()["bpf_programs_compiled"] == 3


def test_a_shared_program_a_capture_left_unclean_is_freed_after_the_last_release() -> None:
    p, made = pool()
    a = p.acquire([Fam("cpu")], share_key="k")
    p.acquire([Fam("cpu")], share_key="k")
    p.release(a, reusable=False)
    assert not made[0].freed and a.holders == 1  # the other capture still runs on it
    p.release(a)
    assert made[0].freed and p.totals()["bpf_programs_idle"] == 0
    assert p.acquire([Fam("cpu")], share_key="k") is not a and len(made) == 2


def test_captures_that_start_together_wait_for_one_compile_and_share_it() -> None:
    gate = threading.Event()
    made: list[FakeBpf] = []

    def slow_compile(families: Sequence[Any]) -> FakeBpf:
        gate.wait(30)
        made.append(FakeBpf())
        return made[-1]

    p = ProgramPool(compile_fn=slow_compile, free_fn=lambda bpf: None)
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(p.acquire([Fam("cpu")], share_key="k"))) for _ in range(3)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(30)
    assert len(made) == 1 and len({id(g) for g in got}) == 1 and got[0].holders == 3
    assert p.counters.shared == 2
