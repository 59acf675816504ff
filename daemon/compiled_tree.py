"""Kernels of compiled code, tied back to the model: a kernel node below a line of an Inductor wrapper module gets
`compiled_from`, the graph nodes, ATen operators and model lines that launch site runs (host/torch_compile.py);
a kernel named after a fusion of a module XLA dumped gets its JAX operations and their lines
(host/xla_dump.py)."""

from __future__ import annotations

from deepctx.daemon.tree import CallTree
from deepctx.host.compiled_sources import CompiledSources, LaunchOrigin
from deepctx.host.torch_compile import is_wrapper_file

# device work a wrapper's launch line stands above
_LAUNCHED = frozenset({"kernel"})


def annotate_compiled(tree: CallTree, sources: CompiledSources) -> dict[str, int]:
    """Sets tree.facts[i]["compiled_from"] on each kernel node whose call path passes through a wrapper's launch
    line (the innermost such frame). Returns the profile's stats."""
    with_lines = without_lines = 0
    if not sources.wrappers and not sources.xla_modules:
        return {}
    nodes = tree.nodes
    wrapper_line: dict[int, LaunchOrigin | None] = {}  # python node -> its launch origin, looked up once
    for idx, node in enumerate(nodes):
        if node.frame.kind not in _LAUNCHED:
            continue
        p = node.parent
        origin = None
        while p > 0:
            f = nodes[p].frame
            if f.kind == "thread":
                break
            if f.kind == "python" and f.file and f.line is not None and is_wrapper_file(f.file):
                if p not in wrapper_line:
                    wrapper_line[p] = sources.origin(f.file, f.line)
                origin = wrapper_line[p]
                break
            p = nodes[p].parent
        if origin is None and sources.xla_modules:
            origin = sources.xla_origin(node.frame.name, _path_lines(tree, idx))
        if origin is None:
            continue
        tree.facts.setdefault(idx, {})["compiled_from"] = origin
        if origin.lines:
            with_lines += 1
        else:
            without_lines += 1
    return {"compiled_kernel_paths": with_lines + without_lines, "compiled_kernel_paths_without_lines": without_lines}


def _path_lines(tree: CallTree, idx: int) -> set[tuple[str, int]]:
    """The Python lines on a node's call path (a JAX kernel's: the line that called the jitted function)."""
    out: set[tuple[str, int]] = set()
    p = tree.nodes[idx].parent
    while p > 0:
        f = tree.nodes[p].frame
        if f.kind == "python" and f.file and f.line is not None:
            out.add((f.file, f.line))
        p = tree.nodes[p].parent
    return out


def compiled_warnings(stats: dict[str, int], traced: bool) -> list[str]:
    missing = stats.get("compiled_kernel_paths_without_lines", 0)
    if not missing:
        return []
    why = ("its structured trace did not name their compile" if traced else
           "the process ran without TORCH_TRACE (`deepctx run` sets it; for `deepctx attach`, start the program with "
           "TORCH_TRACE=DIR)")
    return [f"{missing} kernel paths of torch.compile'd code have their graph nodes and ATen operators but no model "
            f"lines: {why}"]
