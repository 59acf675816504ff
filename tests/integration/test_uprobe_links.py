"""probes/uprobes.close_links on real uprobe_multi links: every link's probes fire until it is closed and
never after, and every descriptor is closed, whether the links are closed together or one alone."""

from __future__ import annotations

import ctypes as ct
import ctypes.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from libc_sites import function_offsets, libc_path  # noqa: E402

from deepctx.host.procfs import AddressSpace
from deepctx.probes import gpu_api
from deepctx.probes.family import Target
from deepctx.probes.uprobes import BPF_TRACE_UPROBE_MULTI, UprobeAttacher, close_links, link_uprobe_multi

SOURCE = """
BPF_ARRAY(calls, u64, 1);
int on_call(struct pt_regs *ctx) {
    int zero = 0;
    u64 *n = calls.lookup(&zero);
    if (n)
        __sync_fetch_and_add(n, 1);
    return 0;
}
"""
# libc functions that nothing in this process calls but the test (through ctypes)
FUNCS = ("labs", "ffs", "toascii", "strverscmp", "a64l", "l64a", "rand_r", "strfry")


@pytest.fixture(scope="module")
def probe() -> Iterator[tuple[Any, int, str, dict[str, int]]]:
    from bcc import BPF

    path = libc_path()
    offsets = function_offsets(path, FUNCS)
    assert sorted(offsets) == sorted(FUNCS), f"{path} lacks some of {FUNCS}"
    assert len(set(offsets.values())) == len(FUNCS), "two of the functions share an address"
    bpf = BPF(text=SOURCE.encode())
    fd = bpf.load_func(b"on_call", BPF.KPROBE, attach_type=BPF_TRACE_UPROBE_MULTI).fd
    yield bpf, fd, path, offsets
    bpf.cleanup()


def call_each() -> None:
    c = ct.CDLL(ctypes.util.find_library("c"))
    c.l64a.restype = ct.c_char_p
    c.strfry.restype = ct.c_char_p
    buf = ct.create_string_buffer(b"abc")
    seed = ct.c_uint(1)
    c.labs(-3), c.ffs(8), c.toascii(200), c.strverscmp(b"a1", b"a2"), c.a64l(b"./")
    c.l64a(64), c.rand_r(ct.byref(seed)), c.strfry(buf)


def calls(bpf: Any) -> int:
    return int(bpf[b"calls"][ct.c_int(0)].value)


@pytest.mark.parametrize("together", [len(FUNCS), 1])
def test_closed_links_stop_their_probes_and_close_their_descriptors(probe: tuple[Any, int, str, dict[str, int]],
                                                                    together: int) -> None:
    bpf, fd, path, offsets = probe
    links = [link_uprobe_multi(fd, path, [offsets[name]], retprobe=False, pid=os.getpid()) for name in FUNCS]
    before = calls(bpf)
    call_each()
    assert calls(bpf) - before == len(FUNCS)  # one hit per function: each link's probe fires
    closing, kept = links[:together], links[together:]
    close_links(closing)
    for link in closing:
        with pytest.raises(OSError):
            os.fstat(link)
    before = calls(bpf)
    call_each()
    assert calls(bpf) - before == len(kept)  # the closed links' probes no longer fire, the kept ones do
    close_links(kept)
    before = calls(bpf)
    call_each()
    assert calls(bpf) == before


CHILD_CALLS = """
import ctypes, ctypes.util
c = ctypes.CDLL(ctypes.util.find_library("c"))
for _ in range(100):
    c.labs(-1)
"""


@pytest.mark.parametrize("pid_of", ["this process", "every process"])
def test_probes_attached_for_one_process_do_not_fire_in_another(probe: tuple[Any, int, str, dict[str, int]],
                                                                pid_of: str) -> None:
    """GpuApi attaches its uprobes for its target alone: another process that maps the same library (another
    rank, another job from the same environment) must not trap on them. With pid 0 it does (the control)."""
    bpf, _, path, offsets = probe
    attacher = UprobeAttacher(bpf, "on_call", "on_call", pid=os.getpid() if pid_of == "this process" else 0)
    attacher.attach(path, [offsets["labs"]], with_return=False)
    try:
        assert attacher.multi is True
        before = calls(bpf)
        subprocess.run([sys.executable, "-c", CHILD_CALLS], check=True)
        other = calls(bpf) - before
        ct.CDLL(ctypes.util.find_library("c")).labs(-1)
        assert calls(bpf) - before - other == 1  # this process's call fires either way
        assert other == (0 if pid_of == "this process" else 100)
    finally:
        attacher.close()


def test_the_gpu_probes_are_attached_for_their_target_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test above shows for the attacher, for GpuApi: it asks for its target's pid."""
    seen: list[int] = []

    class Recording(UprobeAttacher):
        def __init__(self, *args: Any, pid: int = 0, **kw: Any) -> None:
            seen.append(pid)
            super().__init__(*args, pid=pid, **kw)

    monkeypatch.setattr(gpu_api, "UprobeAttacher", Recording)

    class Sink:  # every map of the program: what attach() writes goes nowhere
        def __getitem__(self, name: str) -> Sink:
            return self

        def __setitem__(self, key: object, value: object) -> None:
            pass

        def get_fd(self) -> int:  # a map's descriptor, as the counts' generation pointer asks for it
            return -1

    api = gpu_api.GpuApi(mode="sampled")
    bpf = Sink()
    target = Target(4242, None, AddressSpace([]))  # no GPU library mapped: nothing to attach yet
    api.attach(bpf, target)
    assert seen == [4242]


def test_offsets_with_and_without_returns_share_one_entry_link(probe: tuple[Any, int, str, dict[str, int]]) -> None:
    """GpuApi attaches a library's offsets that want returns and its entry-only ones in one call: one entry
    link takes them all, a return link only the first kind (an uprobe session: one link for all). Each of the
    three functions fires at entry once a call, labs at its return too; the entry-only ones never return."""
    bpf, _, path, offsets = probe
    attacher = UprobeAttacher(bpf, "on_call", "on_call", pid=os.getpid())
    attacher.attach(path, [offsets["labs"]], entry_only=[offsets["ffs"], offsets["toascii"]])
    try:
        assert attacher.multi is True and len(attacher.links) == 2 and attacher.probes == 4
        assert attacher.attached == [(path, [offsets["labs"]], sorted([offsets["labs"], offsets["ffs"],
                                                                        offsets["toascii"]]))]
        c = ct.CDLL(ctypes.util.find_library("c"))
        before = calls(bpf)
        c.labs(-3), c.ffs(8), c.toascii(200)
        assert calls(bpf) - before == 4  # three entries and labs's return
    finally:
        attacher.close()
