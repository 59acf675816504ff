"""Merging profile documents: the same call path adds its metrics (one tree for many windows)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from deepctx.profiles.document import SCHEMA

MAX_WARNINGS = 50
# A node's identity among its siblings, as the daemon's tree has it: the documented frame fields, the
# thread id of thread nodes, and the launch facts of GPU nodes (one kernel launched with two grids is two
# nodes).
_KEY_FIELDS = ("kind", "name", "file", "line", "module", "tid")
_EXTRA_FIELDS = ("grid", "block", "shared_mem", "stream", "device")
# facts of a node, not its identity: a kernel's origin lines, a gpu_function's branches and its resources (what
# low-occupancy reads)
_FACTS = ("compiled_from", "branches", "registers", "static_shared")


def _key(node: dict[str, Any]) -> tuple:
    key = tuple(node.get(f) for f in _KEY_FIELDS)
    if len(node) > 7:  # only GPU nodes carry more than the seven common fields
        key += tuple(tuple(v) if isinstance(v, list) else v for v in (node.get(f) for f in _EXTRA_FIELDS))
    return key


def _empty_like(node: dict[str, Any]) -> dict[str, Any]:
    """A node with node's identity and launch facts, no metrics and no children (the merge adds them)."""
    out = {k: node.get(k) for k in ("kind", "name", "file", "line", "module")}
    out["metrics"] = {}
    out["children"] = []
    for f in ("tid", *_EXTRA_FIELDS, *_FACTS):
        if node.get(f) is not None:
            out[f] = node[f]
    return out


def merge_tree_into(dst: dict[str, Any], src: dict[str, Any]) -> None:
    """Adds src's metrics and subtree into dst (same path, same node); iterative."""
    stack = [(dst, src)]
    while stack:
        d, s = stack.pop()
        dm = d["metrics"]
        for k, v in (s.get("metrics") or {}).items():
            dm[k] = dm.get(k, 0) + v
        index = d.get("_index")
        if index is None:
            index = d["_index"] = {_key(c): c for c in d["children"]}
        for sc in s.get("children") or []:
            key = _key(sc)
            dc = index.get(key)
            if dc is None:
                dc = _empty_like(sc)
                d["children"].append(dc)
                index[key] = dc
            stack.append((dc, sc))


def _finish(root: dict[str, Any], metrics: list[str]) -> None:
    """Drops the merge's child indexes; every node carries every metric."""
    stack = [root]
    while stack:
        n = stack.pop()
        n.pop("_index", None)
        for m in metrics:
            n["metrics"].setdefault(m, 0)
        stack.extend(n["children"])


# Window stats that do not add up across windows: shares (weighted by window length) and levels (sizes and
# states: the max). Every other stat adds up: continuous mode stores a window's running totals as what the
# window added to them (store/deltas.py), so windows of one capture add up to its latest totals.
SHARES = frozenset({"gpu_probe_duty_permille", "gpu_busy_scaled_permille", "device_time_scale_permille",
                    "gpu_call_scale_permille", "gpu_busy_attached_permille", "gpu_busy_detached_permille",
                    "gpu_busy_recording_permille", "device_busy_scaled_permille"})
LEVELS = frozenset({"device_agent_status", "cpu_stack_map_entries", "gpu_sample_interval_ns", "gpu_uprobes",
                    "gpu_probes_attached", "gpu_libraries_attached", "device_agent_injected", "device_usdt_sites",
                    "device_probes_attached", "device_agent_awaited", "table_rules",
                    "program_captures"})  # captures on the program a continuous window's probes shared


class Merger:
    """Adds documents one at a time (a query over many windows holds one decoded window at a time)."""

    def __init__(self) -> None:
        self.metrics: list[str] = []
        self.root: dict[str, Any] = {"kind": "root", "name": "", "file": None, "line": None, "module": None,
                                     "metrics": {}, "children": []}
        self.stats: dict[str, int] = {}
        self._shares: dict[str, tuple[float, float]] = {}  # stat -> (sum of value x duration, duration)
        self.warnings: list[str] = []
        self.compiles: dict[tuple[int, str], dict[str, Any]] = {}  # (pid, compile id): windows repeat them
        self.count = 0
        self._headers: dict[str, set[Any]] = {k: set() for k in ("pid", "command", "hostname", "sample_hz", "mode")}
        self._start = float("inf")
        self._end = float("-inf")

    def add(self, doc: dict[str, Any]) -> None:
        self.count += 1
        for m in doc.get("metrics") or []:
            if m not in self.metrics:
                self.metrics.append(m)
        for k, seen in self._headers.items():
            seen.add(doc.get(k))
        start = float(doc.get("started_unix") or 0.0)
        self._start = min(self._start, start)
        self._end = max(self._end, start + float(doc.get("duration_s") or 0.0))
        if isinstance(doc.get("root"), dict):
            merge_tree_into(self.root, doc["root"])
        duration = float(doc.get("duration_s") or 0.0)
        for k, v in (doc.get("stats") or {}).items():
            if not isinstance(v, int):
                continue
            if k in SHARES:  # a share of each window: weighted by the window's length
                self._shares[k] = (self._shares.get(k, (0.0, 0.0))[0] + v * duration,
                                   self._shares.get(k, (0.0, 0.0))[1] + duration)
            elif k in LEVELS:
                self.stats[k] = max(self.stats.get(k, v), v)
            else:
                self.stats[k] = self.stats.get(k, 0) + v
        for w in doc.get("warnings") or []:
            if w not in self.warnings and len(self.warnings) < MAX_WARNINGS:
                self.warnings.append(w)
        for c in doc.get("compiles") or []:
            self.compiles.setdefault((int(doc.get("pid") or 0), str(c.get("id"))), c)

    def _common(self, key: str) -> Any:
        seen = self._headers[key]
        return next(iter(seen)) if len(seen) == 1 else None

    def result(self, started_unix: float | None = None, ended_unix: float | None = None) -> dict[str, Any] | None:
        """The merged document (None when nothing was added). Header facts shared by every document are
        kept, others become 0, "" or null; stats are added up, plus `windows`: how many documents went in.
        started_unix/ended_unix override the span the documents' own headers give."""
        if not self.count:
            return None
        _finish(self.root, self.metrics)
        command = self._common("command")
        pids = {int(p or 0) for p in self._headers["pid"]}
        self.root["name"] = command if command is not None else f"[{len(pids)} processes]"
        start = self._start if started_unix is None else started_unix
        end = self._end if ended_unix is None else ended_unix
        stats = dict(self.stats, windows=self.count)
        stats.update({k: round(total / d) if d > 0 else 0 for k, (total, d) in self._shares.items()})
        return {
            "schema": SCHEMA,
            "pid": pids.pop() if len(pids) == 1 else 0,
            "command": command or "",
            "hostname": self._common("hostname") or "",
            "started_unix": start,
            "duration_s": max(0.0, end - start),
            "ended": "windows",
            "sample_hz": int(self._common("sample_hz") or 0),
            "mode": self._common("mode"),
            "metrics": list(self.metrics),
            "root": self.root,
            "stats": dict(sorted(stats.items())),
            "warnings": list(self.warnings),
            **({"compiles": list(self.compiles.values())} if self.compiles else {}),
        }


def merge_documents(docs: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """One document whose tree holds every call path of docs, metrics added; None for no documents."""
    m = Merger()
    for d in docs:
        m.add(d)
    return m.result()
