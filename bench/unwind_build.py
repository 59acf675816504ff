"""The unwind table of each file built both ways, in this process: interpreted in Python (cfi.py + interp.py)
and by the C rows (host/unwind/cfi_rows.c); CPU-seconds of each, and whether the tables are equal.

    .venv/bin/python bench/unwind_build.py LIB [LIB ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from deepctx.host.unwind.table import UnwindTable, build_table


def equal(a: UnwindTable, b: UnwindTable) -> bool:
    same = (a.base == b.base and a.rules == b.rules and a.infos.dtype == b.infos.dtype
            and np.array_equal(a.pcs, b.pcs) and np.array_equal(a.infos, b.infos))
    drop = {"build_seconds"}
    return same and {k: v for k, v in a.stats.items() if k not in drop} == {
        k: v for k, v in b.stats.items() if k not in drop}


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print("| file (rows) | Python | C | |\n| --- | --- | --- | --- |")
    ok = True
    for path in paths:
        t = time.process_time()
        py = build_table(path, native=False)
        t_py = time.process_time() - t
        t = time.process_time()
        c = build_table(path, native=True)
        t_c = time.process_time() - t
        same = equal(py, c)
        ok &= same
        print(f"| {Path(path).name} ({len(c):,}) | {t_py:.3f} CPU-s | {t_c:.3f} CPU-s | "
              f"{t_py / max(t_c, 1e-9):.1f}×{'' if same else ', TABLES DIFFER'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
