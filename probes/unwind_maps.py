"""The native unwinder's large arrays (rows, page index, rules), made once per daemon and shared by every
program it loads (#30.2: each file's data goes into the BPF maps once).

Each loaded program with native unwinding used to hold its own: 128 MiB of rows and 16 MiB of page index
(UnwindConfig.min_rows, min_pages), and a capture beside another, which compiles a program of its own,
wrote a PyTorch process's 9 M rows into its arrays again. Here a module of maps only
(native_unwind_maps.bpf.h) exports them by name to the process's other bcc modules, and programs of the
default size class are compiled with NATIVE_SHARED_TABLES, which declares them "extern": bcc gives those
programs the exported maps. The placement of files in them (host/unwind/space.py) is shared as well, under
a lock; it starts afresh only when a capture's new files do not fit and no other capture uses it.

bcc resolves an extern table by name within one process, so there is one set per process, of one size
(the first asked for); a program of a larger class keeps arrays of its own.
"""

from __future__ import annotations

import threading
from typing import Any

from deepctx.host.unwind.space import TableSpace
from deepctx.probes import compose
from deepctx.probes.family import PROBES_DIR, read_source


class SharedUnwindMaps:
    """The exported arrays, their table space and the captures using them."""

    def __init__(self, rows: int, pages: int, rules: int, page_shift: int) -> None:
        self.sizes = (rows, pages, rules)
        self.page_shift = page_shift
        self.lock = threading.RLock()  # placement and writes; a capture's attach and polls take it
        self.space = TableSpace(rows, pages, rules, page_shift)
        self.users = 0  # captures attached to a program that uses them
        self.fresh = True  # the space's initial rules are not written yet
        self._bpf: Any = None

    def defines(self) -> dict[str, int]:
        rows, pages, rules = self.sizes
        return {"NATIVE_MAX_ROWS": rows, "NATIVE_MAX_PAGES": pages, "NATIVE_MAX_INFOS": rules}

    def export(self) -> Any:
        """The module that holds the arrays, compiled at the first call (before the first program that
        declares them extern: bcc looks them up as it compiles that one), under compose's compile lock and
        not self.lock (compile_program holds the first when it calls here; an attach holds the second)."""
        if self._bpf is None:
            with compose.COMPILE_LOCK:
                if self._bpf is None:
                    flags = [f"-I{PROBES_DIR}"] + [f"-D{k}={v}" for k, v in self.defines().items()]
                    self._bpf = compose.compile_text(read_source("native_unwind_maps.bpf.h"), flags)
        return self._bpf

    def table(self, name: bytes) -> Any:
        return self.export()[name]

    def restart(self) -> TableSpace:
        """An empty space (the rows in the arrays stay; nothing names them any more). Under the lock, with
        no other capture attached."""
        self.space = TableSpace(*self.sizes, self.page_shift)
        self.fresh = True
        return self.space


_MAPS: SharedUnwindMaps | None = None
_MAPS_LOCK = threading.Lock()


def daemon_maps(rows: int, pages: int, rules: int, page_shift: int) -> SharedUnwindMaps | None:
    """The process's shared arrays when they are (or can be made) of these sizes; None for another size
    (that program keeps arrays of its own)."""
    global _MAPS
    with _MAPS_LOCK:
        if _MAPS is None:
            _MAPS = SharedUnwindMaps(rows, pages, rules, page_shift)
        m = _MAPS
    return m if m.sizes == (rows, pages, rules) and m.page_shift == page_shift else None


def current_maps() -> SharedUnwindMaps | None:
    """The process's shared arrays if they were made (no size asked for: what a capture about to attach may
    find its files placed in)."""
    with _MAPS_LOCK:
        return _MAPS
