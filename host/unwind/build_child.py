"""Builds one file's unwind table in a process of its own and writes it where the daemon reads it.

    python -m deepctx.host.unwind.build_child ELF_PATH OUT_PATH [MAX_DECOMPRESSED_BYTES MAX_UNWIND_ROWS]

Interpreting a large .eh_frame makes millions of short-lived Python objects (libtorch: 8.7 million rows);
built inside deepctxd, the allocator kept about four times the finished table's size after it was freed.
In a child process that memory goes back with the process. Exit status 0: written; 3: the file has no
table (message on stderr); 4: the file is over a cap (file_limits.py; message on stderr); anything else:
the build failed."""

from __future__ import annotations

import sys
from pathlib import Path

NO_TABLE = 3
OVER_CAP = 4


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4) or not all(a.isdigit() for a in argv[2:]):
        print("usage: python -m deepctx.host.unwind.build_child ELF_PATH OUT_PATH "
              "[MAX_DECOMPRESSED_BYTES MAX_UNWIND_ROWS]", file=sys.stderr)
        return 2
    from deepctx.host.elf.reader import ElfError
    from deepctx.host.file_limits import OverCap, configure
    from deepctx.host.unwind.cfi import CfiError
    from deepctx.host.unwind.disk import save_table
    from deepctx.host.unwind.table import build_table

    if len(argv) == 4:
        configure(int(argv[2]), int(argv[3]))
    try:
        table = build_table(argv[0])
    except OverCap as e:
        print(e, file=sys.stderr)
        return OVER_CAP
    except (ElfError, CfiError, ValueError) as e:
        print(e, file=sys.stderr)
        return NO_TABLE
    save_table(table, Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
