"""Frames the views fold by default: the interpreter's start-up and framework plumbing.

Start-up: the native frames above a thread's outermost Python frame (`_start`, `__libc_start_main`,
`libc.so.6+0x...`, `Py_RunMain`, `pymain_*`, a thread's `start_thread` ...). Native unwinding reaches
them on some calls and not on others (a stack cut under `[unwinding lost the callers]`), which split one
Python call path in two; folded, the outermost Python frame hangs below its thread on every stack.
Stacks with no Python frame keep all their frames: nothing above them is start-up.

Plumbing: Python frames that only pass a call on (`Module._wrapped_call_impl` → `Module._call_impl` →
`forward`) and repeat at every layer of a model. Folded, each one's children and self values go to its
caller, so `step → ResNet.forward → Bottleneck.forward` reads as the model is written.

Dispatch: the native frames around a PyTorch operator (`aten::mm`, host/torch_ops.py): the Python binding
and dispatcher frames that lead from a Python line to the operator, and the dispatcher, autograd and kernel
wrapper frames inside it, down to the next operator, GPU API call, Python frame or thread. Ten to thirty
native frames per call become `line → aten::matmul → aten::mm → cudaLaunchKernel → kernel`, as the
PyTorch profiler shows them; each folded frame's children and self values go to its caller. Native frames
on paths without an operator stay.

The tree builder (profiles/tree.py: from_doc) and the HTML report's flags (cli/formats/html_payload.py)
both classify frames here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# (file path suffix, qualified name): frames that do nothing but dispatch to the next one
PLUMBING: tuple[tuple[str, str], ...] = (
    ("torch/nn/modules/module.py", "Module._wrapped_call_impl"),
    ("torch/nn/modules/module.py", "Module._call_impl"),
    ("torch/utils/_contextlib.py", "context_decorator.<locals>.decorate_context"),  # @torch.no_grad() etc.
    ("transformers/modeling_layers.py", "GradientCheckpointingLayer.__call__"),
    ("transformers/utils/generic.py", "can_return_tuple.<locals>.wrapper"),
    ("transformers/utils/generic.py", "merge_with_config_defaults.<locals>.wrapper"),
    ("transformers/utils/output_capturing.py", "capture_outputs.<locals>.wrapped_fn.<locals>.wrapper"),
)
# Python 3.10 names frames without their class: the last part of the qualified name, same file
_BY_NAME: dict[str, tuple[str, ...]] = {}
for _suffix, _qualname in PLUMBING:
    for _name in {_qualname, _qualname.rsplit(".", 1)[-1]}:
        _BY_NAME[_name] = (*_BY_NAME.get(_name, ()), _suffix)

STARTUP_KINDS = frozenset({"native"})  # what may stand above a thread's outermost Python frame
ZONE_ROOTS = frozenset({"root", "thread"})  # the nodes start-up frames fold into


@dataclass(frozen=True)
class Fold:
    """What the views fold (both by default: a Python and PyTorch user reads a tree most easily so)."""

    startup: bool = True
    plumbing: bool = True
    dispatch: bool = True

    def any(self) -> bool:
        return self.startup or self.plumbing or self.dispatch


VIEWS_DEFAULT = Fold()
SHOW_ALL = Fold(startup=False, plumbing=False, dispatch=False)  # the tree as recorded
OPERATOR_PREFIX = "aten::"  # the operator nodes dispatch folding works around (not "[backward of ...]" labels)


def is_plumbing(kind: str, name: str, file: str | None) -> bool:
    if kind != "python" or not file:
        return False
    suffixes = _BY_NAME.get(name)
    return bool(suffixes) and any(file.endswith(s) for s in suffixes)  # type: ignore[union-attr]


def is_startup(kind: str) -> bool:
    return kind in STARTUP_KINDS


def is_operator(kind: str, name: str) -> bool:
    return kind == "op" and name.startswith(OPERATOR_PREFIX)


def dispatch_frames(root: T, kind_name: Callable[[T], tuple[str, str]], children: Callable[[T], Sequence[T]]) -> set[int]:
    """The ids of the nodes that dispatch folding folds: native frames whose subtree reaches an operator
    through native frames only, and native frames below an operator down to the next other frame. One pass
    down, and none back up in a tree without operators (most trees). For document nodes pass
    operator.itemgetter("kind", "name") and itemgetter("children"): no Python call per node."""
    # preorder: the native nodes, each with whether an operator is above it through natives only
    order: list[tuple[T, bool, Sequence[T]]] = []
    operators: set[int] = set()
    stack: list[tuple[T, bool]] = [(root, False)]
    while stack:
        node, inside = stack.pop()
        kind, name = kind_name(node)
        kids = children(node)
        if kind == "native":
            order.append((node, inside, kids))
            stack.extend((c, inside) for c in kids)
        elif is_operator(kind, name):
            operators.add(id(node))
            stack.extend((c, True) for c in kids)
        else:
            stack.extend((c, False) for c in kids)
    fold: set[int] = set()
    if not operators:
        return fold
    leads: set[int] = set()  # native nodes from which an operator is reached through natives
    for node, inside, kids in reversed(order):  # children before parents
        if any(id(c) in leads or id(c) in operators for c in kids):
            leads.add(id(node))
            fold.add(id(node))
        elif inside:
            fold.add(id(node))
    return fold
