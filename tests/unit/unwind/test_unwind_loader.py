"""NativeUnwinder's map writing against in-memory stand-ins for bcc's tables (no root, no BPF)."""

from __future__ import annotations

import ctypes as ct
import subprocess
import time

import numpy as np
import pytest

from deepctx.host import procfs
from deepctx.host.elf.reader import ElfFile
from deepctx.probes import native_unwind as nu
from deepctx.probes.family import Target


class FakeTable:
    """The slice of bcc's table API the loader uses, over a dict of raw values."""

    def __init__(
        self, leaf: type[ct._SimpleCData] | type[ct.Structure], key: type = ct.c_uint32, ncpu: int = 0
    ) -> None:
        self.Leaf, self.Key, self.ncpu = leaf, key, ncpu
        self.data: dict[int, bytes] = {}

    def __setitem__(self, k: ct._SimpleCData, v: object) -> None:
        self.data[k.value] = bytes(v)  # type: ignore[call-overload]

    def __getitem__(self, k: ct._SimpleCData):
        if self.ncpu:
            return [
                self.Leaf.from_buffer_copy(self.data.get(k.value, bytes(ct.sizeof(self.Leaf))))
            ] * self.ncpu
        if k.value not in self.data:
            raise KeyError(k.value)
        return self.Leaf.from_buffer_copy(self.data[k.value])

    def __delitem__(self, k: ct._SimpleCData) -> None:
        del self.data[k.value]

    def items(self):
        return [(self.Key(k), self.Leaf.from_buffer_copy(v)) for k, v in self.data.items()]

    def items_update_batch(self, keys: ct.Array, values: ct.Array) -> None:
        size = ct.sizeof(values) // len(values)
        raw = bytes(values)
        for i, k in enumerate(keys):
            self.data[k] = raw[i * size : (i + 1) * size]


class FakeBpf(dict):
    """A loaded program's maps by name; one object per program, as bcc's BPF is, which keeps what goes with
    the program as attributes (its ring sinks, its unwind table space)."""


def fake_bpf(u: nu.NativeUnwinder) -> FakeBpf:
    return FakeBpf({
        b"native_rows": FakeTable(nu.NativeUnwindRow),
        b"native_pages": FakeTable(ct.c_uint32),
        b"native_infos": FakeTable(nu.NativeUnwindInfo),
        b"native_procs": FakeTable(nu.native_proc_type(u.config.max_mappings)),
        b"native_stacks": FakeTable(nu.native_stack_type(u.config.max_depth), ct.c_uint64),
        b"native_unwind_stats": FakeTable(nu.NativeUnwindCounters, ct.c_int, ncpu=2),
        b"native_tables_gen": FakeTable(ct.c_uint64, ct.c_int),
    })


@pytest.fixture
def dlopen_target(unwind_targets):
    p = subprocess.Popen(
        [str(unwind_targets / "unwind_target"), "dlopen"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert p.stdout is not None and p.stdout.readline().startswith(b"ready")
    yield p
    p.kill()
    p.wait()


def _generation(bpf) -> int:
    return bpf[b"native_tables_gen"][ct.c_int(0)].value


def _entries(bpf, u: nu.NativeUnwinder, pid: int) -> list[nu.NativeMapping]:
    proc = bpf[b"native_procs"][ct.c_uint32(pid)]
    return [proc.maps[i] for i in range(proc.len)]


def _row_for(bpf, entry: nu.NativeMapping, runtime_pc: int, shift: int) -> tuple[int, ...] | None:
    """What the BPF walker finds for a pc: page index, then the last row at or below it."""
    x = runtime_pc - entry.bias
    page = x >> shift
    if page + 1 >= entry.pages_len:
        return None
    pages, rows = bpf[b"native_pages"].data, bpf[b"native_rows"].data
    lo = int.from_bytes(pages[entry.pages_start + page], "little")
    hi = int.from_bytes(pages[entry.pages_start + page + 1], "little")
    cands = [(i, nu.NativeUnwindRow.from_buffer_copy(rows[i])) for i in range(lo, hi + 1)]
    best = [r for _, r in cands if r.pc <= x][-1]
    info = nu.NativeUnwindInfo.from_buffer_copy(bpf[b"native_infos"].data[best.info])
    return (info.cfa_rule, info.cfa_param, info.cfa_off, info.fp_rule, info.fp_off, info.ra_rule, info.ra_off)


def test_attach_writes_tables_and_mappings_then_poll_adds_a_dlopened_library(dlopen_target, unwind_targets):
    pid = dlopen_target.pid
    target = Target(pid, procfs.process_info(pid), procfs.AddressSpace(procfs.read_maps(pid)))
    u = nu.NativeUnwinder(nu.UnwindConfig(rows_headroom=4096, pages_headroom=256))
    u.prepare(target)
    defines = u.defines()
    assert defines["NATIVE_MAX_ROWS"] > 4096 and defines["NATIVE_PAGE_SHIFT"] == 9
    bpf = fake_bpf(u)
    u.attach(bpf, target)
    attached = _generation(bpf)
    assert attached  # the tables' generation is raised after they are written: memoized walks go stale

    exe = str(unwind_targets / "unwind_target")
    code = [m for m in target.space.mappings if m.executable and m.file_backed]
    entries = _entries(bpf, u, pid)
    assert [(e.start, e.end) for e in entries] == [(m.start, m.end) for m in code]
    assert all(e.pages_len > 0 for e in entries)  # every file here has .eh_frame

    # the function c, through the maps as the walker reads them, has the table's rule
    key, table = u.cache.get(exe, *next(m.file_key for m in code if m.path == exe))
    with ElfFile(exe) as f:
        m = next(m for m in code if m.path == exe)
        bias = f.load_bias(m.start, m.offset)
    sym_c = int(
        subprocess.run(["nm", exe], capture_output=True, text=True).stdout.split(" T c\n")[0].split()[-1], 16
    )
    entry = next(e for e in entries if e.start == m.start)
    for off in range(0, 16):
        assert _row_for(bpf, entry, sym_c + bias + off, 9) == table.rule_at(sym_c + off)

    # dlopen after attach: poll builds the new table in the background and rewrites the pid's mappings
    assert dlopen_target.stdin is not None and dlopen_target.stdout is not None
    dlopen_target.stdin.write(b"go\n")
    dlopen_target.stdin.flush()
    assert dlopen_target.stdout.readline() == b"loaded\n"
    target.space = procfs.AddressSpace(procfs.read_maps(pid))
    deadline = time.monotonic() + 20
    while not any(e.pages_len and e.start not in {x.start for x in entries} for e in _entries(bpf, u, pid)):
        assert time.monotonic() < deadline, "poll() never mapped libunwdl.so"
        u.poll(bpf, target)
        time.sleep(0.01)  # polling a condition with a deadline
    assert u.stats(bpf)["table_files"] == 5 and target.warnings == []
    loaded = _generation(bpf)
    assert loaded > attached  # a value not written before: no memo of the tables before the library matches
    u.poll(bpf, target)
    assert _generation(bpf) == loaded  # nothing written: the memos stay good
    u.detach(bpf, target)
    assert bpf[b"native_procs"].data == {} and _generation(bpf) > loaded
    u.close()


def test_stack_decoding_and_stats():
    u = nu.NativeUnwinder(nu.UnwindConfig(max_depth=5))
    bpf = fake_bpf(u)
    st = nu.native_stack_type(5)(
        3, nu.NATIVE_F_COMPLETE | nu.NATIVE_F_KERNEL_REGS, (ct.c_uint64 * 5)(10, 20, 30, 99, 99)
    )
    bpf[b"native_stacks"][ct.c_uint64(77)] = st
    assert u.stack(bpf, 77) == ([10, 20, 30], nu.NATIVE_F_COMPLETE | nu.NATIVE_F_KERNEL_REGS)
    assert u.stack(bpf, 78) == ([], 0)
    assert u.stacks(bpf) == {77: ([10, 20, 30], nu.NATIVE_F_COMPLETE | nu.NATIVE_F_KERNEL_REGS)}
    assert nu.flag_names(nu.NATIVE_F_COMPLETE | nu.NATIVE_F_KERNEL_REGS) == ["complete", "kernel_regs"]
    counters = nu.NativeUnwindCounters()
    counters.v[0], counters.v[2] = 3, 40
    bpf[b"native_unwind_stats"][ct.c_int(0)] = counters
    stats = u.stats(bpf)
    assert stats["calls"] == 6 and stats["frames"] == 80  # summed over the two fake CPUs
    assert np.all([stats[name] == 0 for name in nu.STAT_NAMES if name not in ("calls", "frames")])


def test_large_tables_are_built_behind_the_first_samples(dlopen_target, unwind_targets):
    """A file whose table needs a child build is not waited for at prepare: its mappings go in without
    rows (frame pointers there), and poll places its table once built."""
    import threading

    pid = dlopen_target.pid
    target = Target(pid, procfs.process_info(pid), procfs.AddressSpace(procfs.read_maps(pid)))
    u = nu.NativeUnwinder(nu.UnwindConfig(rows_headroom=0, pages_headroom=0))
    u.cache.child_min_bytes = 0  # every file is "large"
    gate, started, real_get = threading.Event(), [], u.cache.get

    def gated_get(*args):
        started.append(args[0])
        assert gate.wait(60), "the test never opened the gate"
        return real_get(*args)

    u.cache.get = gated_get  # type: ignore[method-assign]
    u.prepare(target)  # returns with every build held at the gate
    state = target.state["native_unwind"]
    code = [m for m in target.space.mappings if m.executable and m.file_backed]
    assert set(state.pending) == {m.file_key for m in code} and not state.tables
    assert u.defines()["NATIVE_MAX_ROWS"] > 0  # room for what is being built
    bpf = fake_bpf(u)
    u.attach(bpf, target)
    assert [e.pages_len for e in _entries(bpf, u, pid)] == [0] * len(code)  # unwound with frame pointers
    gate.set()
    deadline = time.monotonic() + 60
    while not all(e.pages_len for e in _entries(bpf, u, pid)):
        assert time.monotonic() < deadline, "poll() never placed the tables built in the background"
        u.poll(bpf, target)
        time.sleep(0.01)  # polling a condition with a deadline
    assert u.cache.counters["child_builds"] == len(code) and target.warnings == []
    u.close()


def test_tables_still_being_built_do_not_size_the_program(dlopen_target):
    """Only an upper bound of a table's rows is known before it is built (1.1 to 2x): sized by it, a first
    capture of PyTorch with an empty disk cache compiled a program of the next size class on the H200 (9 s)
    for tables that fit the smaller one. The program is sized by the tables built so far."""
    import threading

    pid = dlopen_target.pid
    target = Target(pid, procfs.process_info(pid), procfs.AddressSpace(procfs.read_maps(pid)))
    u = nu.NativeUnwinder(nu.UnwindConfig(min_rows=0, min_pages=0, rows_headroom=1 << 10, pages_headroom=1 << 6))
    u.cache.child_min_bytes = 0  # every file is built in the background
    gate, real_get = threading.Event(), u.cache.get

    def gated_get(*args):
        assert gate.wait(60), "the test never opened the gate"
        return real_get(*args)

    u.cache.get = gated_get  # type: ignore[method-assign]
    try:
        u.prepare(target)
        assert target.state["native_unwind"].pending and not target.state["native_unwind"].tables
        defines = u.defines()
        assert (defines["NATIVE_MAX_ROWS"], defines["NATIVE_MAX_PAGES"]) == (2 << 10, 2 << 6)
    finally:
        gate.set()
        u.close()


def test_a_programs_rows_are_written_once_for_every_capture_it_serves(dlopen_target):
    """The rows stay in a loaded program's maps between captures (the pool's reset leaves the large arrays):
    a second capture of the same process on the same program writes no row and finds each file where the
    first placed it; on another program, or where the kept space has no room for a file not placed yet, it
    writes them again."""
    pid = dlopen_target.pid

    def capture(bpf: FakeBpf | None, config: nu.UnwindConfig) -> tuple[FakeBpf, int, list[tuple[int, int, int]]]:
        target = Target(pid, procfs.process_info(pid), procfs.AddressSpace(procfs.read_maps(pid)))
        u = nu.NativeUnwinder(config)
        u.prepare(target)
        u.defines()
        bpf = bpf if bpf is not None else fake_bpf(u)
        bpf[b"native_rows"].data.clear()  # the rows in the kernel's map stay; this counts what attach writes
        u.attach(bpf, target)
        written = len(bpf[b"native_rows"].data)
        placed = [(e.start, e.pages_start, e.pages_len) for e in _entries(bpf, u, pid)]
        u.detach(bpf, target)
        u.close()
        return bpf, written, placed

    config = nu.UnwindConfig()
    bpf, first, placed = capture(None, config)
    assert first > 1000
    _, second, again = capture(bpf, config)
    assert second == 0 and again == placed
    _, other, _ = capture(None, config)  # another program: its maps are empty
    assert other == first
    # a kept space that is nearly full still serves a capture whose files are all in it ...
    fit = nu.UnwindConfig(min_rows=0, min_pages=0, rows_headroom=0, pages_headroom=0)
    bpf, first, _ = capture(None, fit)
    _, second, _ = capture(bpf, fit)
    assert first > 1000 and second == 0
    # ... and starts over where a new file does not fit: the next capture writes every row again
    space = bpf.deepctx_unwind_space
    space._next_row = space.max_rows  # full: as if other files took the rest
    _, refilled, _ = capture(bpf, fit)
    assert refilled == 0  # every file of this target is placed: nothing new to fit
    key = next(iter(space._placed))
    del space._placed[key]  # one of its files is new to the kept space and has no room: afresh
    _, refilled, _ = capture(bpf, fit)
    assert refilled == first and bpf.deepctx_unwind_space is not space
