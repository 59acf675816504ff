"""host/unwind/disk.py: a table read back from the disk cache equals the one saved, and its arrays are
allocated once (the row array was read twice and copied once: a first PyTorch capture's peak on the H200
held 57 MB of transient copies)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np

from deepctx.host.unwind import disk
from deepctx.host.unwind.table import UnwindTable


def test_a_saved_table_is_read_back_whole_with_its_arrays_allocated_once(tmp_path: Path) -> None:
    n = 2_000_000
    table = UnwindTable(arch="x86_64", base=0x1000, pcs=np.arange(0, 4 * n, 4, dtype=np.uint32),
                        infos=np.arange(n, dtype=np.uint32) % 5, rules=[(1, 2, 3, 4, 5, 6, 7), (0,) * 7],
                        build_id=None, stats={})
    path = tmp_path / "t.npz"
    disk.save_table(table, path)
    tracemalloc.start()
    try:
        got = disk.load_table(path, "abc")
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.pcs.dtype == np.uint32 and np.array_equal(got.pcs, table.pcs)
    assert np.array_equal(got.infos, table.infos) and got.rules == table.rules
    assert (got.arch, got.base, got.build_id, got.stats) == ("x86_64", 0x1000, "abc", {"rows": float(n)})
    arrays = got.pcs.nbytes + got.infos.nbytes
    assert held >= arrays and peak < arrays * 1.1, (held, peak, arrays)  # no second copy of either array
