"""The data the HTML report embeds: the tree as column arrays in preorder, strings interned once.

Compact on purpose: a 100k-node profile is a few MB of JSON the page parses in well under a second.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

from deepctx.cli.views.diff import DiffNode, kernel_changes, kernel_metric, path_changes
from deepctx.host.identity import NOBODY, AccessCheckFailed, Ids, as_identity, read_regular
from deepctx.profiles.fold import VIEWS_DEFAULT, ZONE_ROOTS, Fold, dispatch_frames, is_plumbing, is_startup
from deepctx.profiles.metrics import METRIC_TITLES, METRIC_UNITS
from deepctx.profiles.tree import Frame, ViewNode, gc_paused, origin_lines

KINDS = ["root", "thread", "python", "native", "op", "api", "kernel", "memcpy", "memset", "sync"]
MAX_SOURCE_BYTES = 2_000_000  # per file: a generated or data file is not worth embedding
MAX_SOURCES_BYTES = 32_000_000


class _Columns:
    def __init__(self, metrics: list[str]) -> None:
        self.strings: list[str] = []
        self.index: dict[str, int] = {}
        self.kinds = list(KINDS)
        self.cols: dict[str, list[int]] = {k: [] for k in ("parent", "kind", "name", "file", "line", "module", "tid", "fn",
                                                           "note")}
        self.functions: dict[Frame, int] = {}  # frame with the line dropped -> function id (flat, bottom-up)
        self.values: dict[str, list[int]] = {m: [] for m in metrics}
        self.base: dict[str, list[int]] = {m: [] for m in metrics}

    def s(self, text: str | None) -> int:
        if text is None:
            return -1
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.strings)
            self.strings.append(text)
        return i

    def add(self, frame: Frame, parent: int, tid: int | None, note: str | None = None) -> int:
        """note: what the page shows after the frame (a compiled kernel's model lines)."""
        if frame.kind not in KINDS:  # the page puts kinds in class attributes: nothing but [a-z0-9_-]
            frame = frame._replace(kind=re.sub(r"[^a-z0-9_-]", "_", frame.kind.lower())[:32])
        if frame.kind not in self.kinds:
            self.kinds.append(frame.kind)
        c = self.cols
        c["parent"].append(parent)
        c["kind"].append(self.kinds.index(frame.kind))
        c["name"].append(self.s(frame.name))
        c["file"].append(self.s(frame.file))
        c["line"].append(frame.line or 0)
        c["module"].append(self.s(frame.module))
        c["tid"].append(tid if tid is not None else -1)
        c["fn"].append(self.functions.setdefault(frame.function(), len(self.functions)))
        c["note"].append(self.s(note))
        return len(c["parent"]) - 1


def node_note(node: ViewNode) -> str | None:
    """A kernel of torch.compile'd code: the model lines it came from ("from model.py:41, 42, 47")."""
    cf = node.extra.get("compiled_from")
    if not cf:
        return None
    lines = origin_lines(cf)
    if lines:
        return f"from {lines}"
    return "compiled from " + ", ".join(cf["aten"]) if cf.get("aten") else None


def _meta(doc: dict[str, Any]) -> dict[str, Any]:
    keys = ("command", "pid", "hostname", "started_unix", "duration_s", "ended", "sample_hz", "mode", "warnings")
    return {k: doc.get(k) for k in keys}


def _subtitle(doc: dict[str, Any]) -> str:
    parts = [f"pid {doc.get('pid')}", f"{float(doc.get('duration_s') or 0):.2f} s"]
    if doc.get("hostname"):
        parts.append(f"host {doc['hostname']}")
    if doc.get("sample_hz"):
        parts.append(f"{doc['sample_hz']} Hz")
    if doc.get("mode"):
        parts.append(f"GPU calls {doc['mode']}")
    return ", ".join(parts)


def _common(metrics: list[str], default_metric: str) -> dict[str, Any]:
    return {"metrics": metrics, "units": {m: METRIC_UNITS.get(m, "count") for m in metrics},
            "titles": {m: METRIC_TITLES.get(m, m) for m in metrics}, "defaultMetric": default_metric}


# Bits of the `flags` column: what the page's toggles fold (the classification is profiles/fold.py's; the
# page merges what folding brings together, as profiles/tree.py does)
LIFT = 1  # the outermost Python frame below start-up frames: moves up to its thread
PLUMBING = 2  # framework plumbing: its children and self values go to its caller
STARTUP = 4  # a start-up frame: goes when lifting leaves it with nothing
DISPATCH = 8  # a native frame around a PyTorch operator: its children and self values go to its caller


@gc_paused
def profile_payload(doc: dict[str, Any], root: ViewNode, default_metric: str, sources: dict[str, str],
                    fold: Fold = VIEWS_DEFAULT) -> dict[str, Any]:
    """root: the tree as recorded (from_doc's default); the page folds it as its toggles say, starting
    from fold."""
    metrics = list(root.total)
    cols = _Columns(metrics)
    flags: list[int] = []
    dispatch = dispatch_frames(root, lambda n: (n.frame.kind, n.frame.name), lambda n: n.children)
    # (node, parent's index, above its thread's outermost Python frame, below a start-up frame)
    stack: list[tuple[ViewNode, int, bool, bool]] = [(root, -1, True, False)]
    while stack:
        node, parent, above, under_startup = stack.pop()
        i = cols.add(node.frame, parent, node.tid, node_note(node))
        for m in metrics:
            cols.values[m].append(node.self[m])
        f = node.frame
        bits = (PLUMBING if is_plumbing(f.kind, f.name, f.file) else 0) | (DISPATCH if id(node) in dispatch else 0)
        if f.kind in ZONE_ROOTS:
            above, under_startup = True, False
        elif above and is_startup(f.kind):
            bits |= STARTUP
            under_startup = True
        elif above and f.kind == "python" and under_startup:
            bits |= LIFT
        flags.append(bits)
        below = above and (f.kind in ZONE_ROOTS or is_startup(f.kind))
        stack.extend((c, i, below, under_startup) for c in reversed(node.children))
    return {"mode": "profile", "title": doc.get("command") or "deepctx profile", "subtitle": _subtitle(doc),
            "meta": _meta(doc), **_common(metrics, default_metric), "kinds": cols.kinds, "strings": cols.strings,
            "nodes": {**cols.cols, "flags": flags}, "values": cols.values, "sources": sources,
            "findings": doc.get("findings") or [], "trace": doc.get("trace") or None,
            "compiles": doc.get("compiles") or None,
            "fold": {"startup": fold.startup, "plumbing": fold.plumbing, "dispatch": fold.dispatch}}


@gc_paused
def diff_payload(before: dict[str, Any], after: dict[str, Any], root: DiffNode, default_metric: str,
                 limit: int = 300) -> dict[str, Any]:
    metrics = list(root.after_total)
    cols = _Columns(metrics)
    stack: list[tuple[DiffNode, int]] = [(root, -1)]
    while stack:
        node, parent = stack.pop()
        i = cols.add(node.frame, parent, None)
        for m in metrics:
            cols.values[m].append(node.after_self.get(m, 0))
            cols.base[m].append(node.before_self.get(m, 0))
        stack.extend((c, i) for c in reversed(node.children))
    km = kernel_metric(root)
    kernels = [{"kind": k.frame.kind, "name": k.frame.name, "status": k.status(km), "before": k.before.get(km, 0),
                "after": k.after.get(km, 0), "calls_before": k.before.get("calls", 0), "calls_after": k.after.get("calls", 0)}
               for k in kernel_changes(root)][:limit]
    paths = [{"path": [f.label() for f in c.path], "status": c.status, "before": c.before, "after": c.after}
             for c in path_changes(root, default_metric)[:limit]]
    title = f"diff: {before.get('command', '?')} → {after.get('command', '?')}"
    return {"mode": "diff", "title": title, "subtitle": f"before: {_subtitle(before)}; after: {_subtitle(after)}",
            "meta": {"warnings": []}, **_common(metrics, default_metric), "kinds": cols.kinds, "strings": cols.strings,
            "nodes": cols.cols, "values": cols.values, "base": cols.base, "sources": {}, "findings": [], "trace": None,
            "changes": {"kernel_metric": km, "path_metric": default_metric, "kernels": kernels, "paths": paths}}


def read_sources(root: ViewNode, owner_uid: int | None = None) -> dict[str, str]:
    """The text of the Python files that Python frames name, and of the CUDA sources PC-sampled kernels'
    lines name (gpu_line), read now (at report time), where it is safe to: see source_text. owner_uid: the
    profiled process's owner, where known."""
    names = sorted({n.frame.file for n in root.walk() if n.frame.kind in ("python", "gpu_line") and n.frame.file})
    out: dict[str, str] = {}
    budget = MAX_SOURCES_BYTES
    for name in names:
        text = source_text(name, min(MAX_SOURCE_BYTES, budget), owner_uid)
        if text is not None:
            out[name] = text
            budget -= len(text)
    return out


def source_text(name: str, limit: int, owner_uid: int | None = None) -> str | None:
    """The file a profiled frame names (the target chose that name), or None. Only a regular file (opened
    without blocking and checked on the descriptor: never a FIFO, device or socket) of at most limit bytes.
    Root's CLI reads as the profiled process's owner (host/identity.py: that owner's fs ids, no groups, no
    capabilities; nobody's when not known), so every directory on the way is checked as for them, and only
    a file readable by all, or owned by owner_uid and readable by its owner. Anyone else reads with their
    own rights."""
    def owner_may(st: os.stat_result) -> bool:
        return bool(st.st_mode & stat.S_IROTH) or (owner_uid is not None and st.st_uid == owner_uid
                                                   and bool(st.st_mode & stat.S_IRUSR))

    if os.geteuid() != 0:
        data = read_regular(name, limit)
    else:
        uid = owner_uid if owner_uid is not None else NOBODY
        try:
            data = as_identity(Ids(uid, NOBODY if uid != 0 else 0), lambda: read_regular(name, limit, owner_may))
        except AccessCheckFailed:
            return None
    return None if data is None else data.decode("utf-8", errors="replace")


