"""Python-leaf self time: each sample's self value charged to its innermost Python frame.

Native self time charges a sample to the innermost frame, which in a Python program is often a libc or
interpreter address with no symbol (`libc.so.6+0x…`): the Python function that called it then shows less
self time than the samples it was the innermost Python frame of. Here the self values of native frames
move to the nearest Python frame above them; native frames with no Python frame above them (native
threads), operators, GPU API calls and device work keep theirs. Totals are left as they were.
"""

from __future__ import annotations

from deepctx.profiles.tree import ViewNode, gc_paused

SELF_MODES = ("python", "native")


def has_python(root: ViewNode) -> bool:
    return any(n.frame.kind == "python" for n in root.walk())


def default_self_mode(root: ViewNode) -> str:
    """Python-leaf for Python targets, native otherwise."""
    return "python" if has_python(root) else "native"


@gc_paused
def python_leaf_self(root: ViewNode) -> ViewNode:
    """A copy of the tree whose native frames' self values are charged to their nearest Python caller (a
    native frame whose nearest non-native caller is not Python keeps its own). Totals are unchanged."""
    out = _copy(root)
    # (node in the copy, the Python frame native self values below it go to, or None)
    stack: list[tuple[ViewNode, ViewNode | None]] = [(out, None)]
    while stack:
        node, owner = stack.pop()
        kind = node.frame.kind
        if kind == "native":
            if owner is not None:
                for m, v in node.self.items():
                    if v:
                        owner.self[m] = owner.self.get(m, 0) + v
                        node.self[m] = 0
        else:
            owner = node if kind == "python" else None
        stack.extend((c, owner) for c in node.children)
    return out


def _copy(root: ViewNode) -> ViewNode:
    top = ViewNode(root.frame, dict(root.self), root.total, [], root.tid, root.extra)
    stack = [(root, top)]
    while stack:
        src, dst = stack.pop()
        for c in src.children:
            cc = ViewNode(c.frame, dict(c.self), c.total, [], c.tid, c.extra)
            dst.children.append(cc)
            stack.append((c, cc))
    return top
