"""bench/new_threads.py's counts of the short threads' samples, from a deepctx profile and a py-spy speedscope file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import new_threads as nt  # noqa: E402


def node(kind: str, name: str, own: int = 0, children: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    return {"kind": kind, "name": name, "metrics": {"cpu_samples": own} if own else {}, "children": children or [], **kw}


def test_deepctx_counts_split_the_short_threads_samples_by_what_they_hold() -> None:
    worker = node("python", "short_worker", 3, [node("python", "spin_until", 40)])
    doc = {"root": node("root", "python3", children=[
        node("thread", "python3 (MainThread)", tid=7, children=[node("python", "<module>", 9)]),  # main: left out
        node("thread", "python3 (short)", tid=8, children=[node("python", "_bootstrap", 1, [worker])]),
        node("thread", "python3", tid=10, children=[node("python", "short_worker", 4)]),
        node("thread", "thread 9", tid=9, children=[
            node("native", "start_thread", children=[node("python", nt.MISSING, 5), node("native", "munmap", 2)])]),
    ])}
    assert nt.deepctx_counts(doc, main_tid=7) == {"samples": 55, "worker": 47, "missing": 5, "outside_python": 2,
                                                   "threads": 3, "named": 1}


def test_pyspy_counts_leave_the_main_thread_out() -> None:
    doc = {"shared": {"frames": [{"name": "<module>"}, {"name": "_bootstrap"}, {"name": "short_worker"},
                                 {"name": "spin_until"}]},
           "profiles": [{"unit": "none", "samples": [[0], [1, 2, 3], [1]], "weights": [4, 6, 1]},
                        {"unit": "none", "samples": [[1, 2]], "weights": [2]}]}
    assert nt.pyspy_counts(doc) == {"samples": 9, "worker": 8}
    assert nt.share(8, 9) == 8 / 9
