"""The walker's row and page arrays are written through a mapping of the map's memory (BPF_F_MMAPABLE), only
the pages written: what a real kernel map holds afterwards, element by element, for 8-byte rows and 4-byte
page entries (each at an 8-byte stride), the daemon's peak memory, and the batch update where a map cannot be
mapped."""

from __future__ import annotations

import ctypes as ct
import re

import numpy as np
import pytest

pytest.importorskip("bcc", reason="needs bcc (Debian's python3-bpfcc)")

from deepctx.probes import native_unwind as nu  # noqa: E402

pytestmark = pytest.mark.root

PROGRAM = """
BPF_F_TABLE("array", int, u64, rows, 4096, BPF_F_MMAPABLE);
BPF_F_TABLE("array", int, u32, pages, 1000, BPF_F_MMAPABLE);
BPF_F_TABLE("array", int, u64, big, 1 << 24, BPF_F_MMAPABLE);
BPF_ARRAY(plain, u32, 1000);
int unused(void *ctx) { return 0; }
"""


@pytest.fixture(scope="module")
def bpf():
    from bcc import BPF

    b = BPF(text=PROGRAM.encode())
    yield b
    b.cleanup()


def test_rows_and_pages_land_where_the_walker_reads_them(bpf) -> None:
    rows = (np.arange(3000, dtype=np.uint64) << np.uint64(32)) | np.uint64(7)
    assert nu._write_mapped(bpf[b"rows"], 1000, rows)
    got = [bpf[b"rows"][ct.c_int(i)].value for i in (999, 1000, 2500, 3999)]
    assert got == [0, 7, (1500 << 32) | 7, (2999 << 32) | 7]
    assert nu._write_mapped(bpf[b"rows"], 4093, np.array([1, 2, 3], dtype=np.uint64))  # the map's last page
    assert [bpf[b"rows"][ct.c_int(i)].value for i in (3999, 4092, 4093, 4095)] == [(2999 << 32) | 7, 0, 1, 3]
    pages = np.array([5, 6, 0xFFFFFFFF], dtype=np.uint32)
    nu._write_array(bpf[b"pages"], 997, pages)
    assert [bpf[b"pages"][ct.c_int(i)].value for i in (996, 997, 998, 999)] == [0, 5, 6, 0xFFFFFFFF]


def test_a_map_that_cannot_be_mapped_takes_the_batch_update(bpf) -> None:
    values = np.array([1, 2, 3], dtype=np.uint32)
    assert not nu._write_mapped(bpf[b"plain"], 10, values)
    assert not nu._write_mapped(bpf[b"pages"], 998, values)  # past the end: refused, not cut
    nu._write_array(bpf[b"plain"], 10, values)
    assert [bpf[b"plain"][ct.c_int(i)].value for i in (9, 10, 11, 12, 13)] == [0, 1, 2, 3, 0]


def vm_hwm_mb() -> float:
    status = open("/proc/self/status").read()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1)) / 1024


def test_only_the_pages_written_are_mapped(bpf) -> None:
    """The kernel maps all of a mapping's pages of a BPF array at once: a write of a few rows into the 128
    MiB array maps a few pages, or the daemon's peak RSS would take the whole array at every write."""
    before = vm_hwm_mb()
    assert nu._write_mapped(bpf[b"big"], (1 << 24) - 5000, np.arange(4000, dtype=np.uint64))
    assert vm_hwm_mb() - before < 8
    assert bpf[b"big"][ct.c_int((1 << 24) - 1001)].value == 3999
