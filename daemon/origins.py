"""The front of a call path for work done on behalf of another thread: a hand-off call's path (worker
launches during autograd's backward, XLA's execute) or a work item's creator (a backward node's forward
line), then an `op` frame that says how the work got there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from deepctx.host.frames import Frame


class _Resolver(Protocol):
    def path(self, tid: int, user_stack: int, py_stack: int, lost: bool) -> list[Frame]: ...


def creation_frames(path: list[Frame]) -> list[Frame]:
    """A work item's creation path up to its innermost Python frame: the native frames below it are the
    framework's bookkeeping (the operator's autograd wrapper, the sequence counter), not the user's code."""
    last = max((i for i, f in enumerate(path) if f.kind == "python"), default=-1)
    return path[:last + 1] if last >= 0 else path


# A worker thread's role from how its work got there, for threads whose name says nothing (XLA's pools
# keep the process's name; PyTorch names its autograd threads itself)
_WORKER_ROLES = (("[xla execute]", "xla executor"), ("[xla compile]", "xla compiler"))


class Origins:
    """Turns a bucket's origin fields into frames. labels: the hand-off points' labels by index (a
    label may hold '{node}', the work item's type name); node_types: vtable address -> type name."""

    def __init__(self, labels: Sequence[str] = (), node_types: Mapping[int, str] | None = None) -> None:
        self.labels = labels
        self.node_types = node_types or {}

    def label(self, index: int, node: int) -> str:
        label = self.labels[index] if index < len(self.labels) else "[hand-off]"
        if "{node}" in label:
            label = label.replace("{node}", self.node_types.get(node) or f"node type {node:#x}")
        return label

    def frames(self, resolver: _Resolver, tid: int, user_stack: int, py_stack: int, label: int,
               node: int, worker: list[Frame] | None = None) -> list[Frame]:
        """The origin's path, the op frame, then the worker's path (its thread frame named with a role
        from the op when its name has none)."""
        path = resolver.path(tid, user_stack, py_stack, lost=not user_stack)
        if node:
            path = creation_frames(path)
        text = self.label(label, node)
        worker = list(worker or [])
        if worker and worker[0].kind == "thread" and not worker[0].name.endswith(")"):
            role = next((r for prefix, r in _WORKER_ROLES if text.startswith(prefix)), None)
            if role:
                worker[0] = worker[0]._replace(name=f"{worker[0].name} ({role})")
        return path + [Frame("op", text)] + worker
