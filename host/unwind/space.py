"""Placement of file tables in the walker's fixed-size maps: one shared rows array, one page index
array, one rules array.

Each file's rows (and its page index) take a contiguous range, assigned once and shared by every
process that maps the file. Rules are deduplicated across files. Nothing is freed: the space goes with
the loaded program from one capture to the next (probes/native_unwind.py starts an empty one when a
capture's new files do not fit), so this is a bump allocator that counts what does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deepctx.host.unwind.arch import INFO_NONE, INFO_UNSUPPORTED, Info
from deepctx.host.unwind.table import UnwindTable


@dataclass(frozen=True)
class Placement:
    rows_start: int
    rows_len: int  # 0: the file has no rows in the map (no CFI, or it did not fit)
    pages_start: int
    pages_len: int  # pages + 1, as struct native_mapping wants it; 0 with no rows


@dataclass
class Upload:
    """What to write to the maps for one newly placed file."""

    rows_start: int
    rows: np.ndarray  # uint64: pc | rule << 32, the layout of struct native_unwind_row
    pages_start: int
    pages: np.ndarray  # uint32: for each page of code (and one past the last), its first row's index
    rules: list[tuple[int, Info]]  # (index, rule) not written before


NO_ROWS = Placement(0, 0, 0, 0)


def page_index(pcs: np.ndarray, rows_start: int, page_shift: int) -> np.ndarray:
    """Absolute index of the row covering the first byte of each page, plus one entry past the last
    page: rows [pages[p], pages[p + 1]] hold every candidate for a pc in page p."""
    npages = (int(pcs[-1]) >> page_shift) + 1
    starts = np.arange(npages + 1, dtype=np.uint64) << np.uint64(page_shift)
    idx = np.searchsorted(pcs, starts, side="right").astype(np.int64) - 1
    return (np.maximum(idx, 0) + rows_start).astype(np.uint32)


class TableSpace:
    def __init__(self, max_rows: int, max_pages: int, max_rules: int, page_shift: int) -> None:
        if max_rules < 2:
            raise ValueError("need room for the two reserved rules")
        self.max_rows = max_rows
        self.max_pages = max_pages
        self.max_rules = max_rules
        self.page_shift = page_shift
        self._next_row = 0
        self._next_page = 0
        self._placed: dict[str, Placement] = {}
        # 0: no rule here (frame pointers); 1: unsupported, also where the rules map is full
        self._rules: dict[Info, int] = {INFO_NONE: 0, INFO_UNSUPPORTED: 1}
        self.counters = {
            "files": 0,
            "rows": 0,
            "pages": 0,
            "files_dropped": 0,
            "rows_dropped": 0,
            "rules_dropped": 0,
        }

    def initial_rules(self) -> list[tuple[int, Info]]:
        return [(i, r) for r, i in self._rules.items()]

    def placement(self, key: str) -> Placement | None:
        return self._placed.get(key)

    def place(self, key: str, table: UnwindTable) -> Upload | None:
        """Reserves rows for a file not placed before; None if already placed, empty or out of room."""
        if key in self._placed:
            return None
        n = len(table)
        if n == 0:
            self._placed[key] = NO_ROWS
            return None
        # room first: the page index of a table spanning 4 GiB would be millions of entries
        if self._next_row + n > self.max_rows or self._next_page + table.pages(self.page_shift) > self.max_pages:
            self._placed[key] = NO_ROWS
            self.counters["files_dropped"] += 1
            self.counters["rows_dropped"] += n
            return None
        pages = page_index(table.pcs, self._next_row, self.page_shift)
        new_rules: list[tuple[int, Info]] = []
        remap = np.empty(len(table.rules), np.uint64)
        for local, rule in enumerate(table.rules):
            idx = self._rules.get(rule)
            if idx is None:
                if len(self._rules) < self.max_rules:
                    idx = self._rules[rule] = len(self._rules)
                    new_rules.append((idx, rule))
                else:
                    idx = 1
                    self.counters["rules_dropped"] += 1
            remap[local] = idx
        rows = table.pcs.astype(np.uint64) | (remap[table.infos] << np.uint64(32))
        start, pstart = self._next_row, self._next_page
        self._next_row += n
        self._next_page += len(pages)
        self._placed[key] = Placement(start, n, pstart, len(pages))
        self.counters["files"] += 1
        self.counters["rows"] += n
        self.counters["pages"] += len(pages)
        return Upload(start, rows, pstart, pages, new_rules)

    @property
    def rows_used(self) -> int:
        return self._next_row

    @property
    def pages_used(self) -> int:
        return self._next_page

    @property
    def rules_used(self) -> int:
        return len(self._rules)
