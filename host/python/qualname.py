"""Qualified names for Python 3.10, whose code objects carry only co_name: rebuilt from the source
file the way the compiler names scopes (Class.method, outer.<locals>.inner, f.<locals>.<lambda>),
keyed by (co_name, co_firstlineno)."""

from __future__ import annotations

import ast

_COMPREHENSIONS = {
    ast.ListComp: "<listcomp>",
    ast.SetComp: "<setcomp>",
    ast.DictComp: "<dictcomp>",
    ast.GeneratorExp: "<genexpr>",
}

_AMBIGUOUS = ""


class _Namer(ast.NodeVisitor):
    def __init__(self) -> None:
        self.names: dict[tuple[str, int], str] = {}
        self._stack: list[tuple[str, bool]] = []  # (qualname, is a function-like scope)

    def _first_line(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
        # co_firstlineno of a decorated definition is its first decorator's line
        return min([node.lineno, *(d.lineno for d in node.decorator_list)])

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_defaults(node.args, node.decorator_list, node.returns)
        self._scope_body(node, node.name, self._first_line(node), True)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._visit_defaults(node.args, node.decorator_list, node.returns)
        self._scope_body(node, node.name, self._first_line(node), True)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for n in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(n)
        self._scope_body(node, node.name, self._first_line(node), False)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_defaults(node.args, [], None)
        self._scope_body(node, "<lambda>", node.lineno, True, body=[node.body])

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        # the first iterable is evaluated in the enclosing scope
        self.visit(node.generators[0].iter)
        self._scope_body(node, _COMPREHENSIONS[type(node)], node.lineno, True, comprehension=True)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def _visit_defaults(self, args: ast.arguments, decorators: list[ast.expr], returns: ast.expr | None) -> None:
        # defaults, annotations and decorators belong to the enclosing scope
        for n in [*args.defaults, *(d for d in args.kw_defaults if d is not None), *decorators]:
            self.visit(n)
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None and a.annotation is not None:
                self.visit(a.annotation)
        if returns is not None:
            self.visit(returns)

    def _scope_body(
        self,
        node: ast.AST,
        name: str,
        firstlineno: int,
        is_function: bool,
        body: list[ast.AST] | None = None,
        comprehension: bool = False,
    ) -> None:
        if not self._stack:
            qual = name
        else:
            parent, parent_is_function = self._stack[-1]
            qual = f"{parent}.<locals>.{name}" if parent_is_function else f"{parent}.{name}"
        key = (name, firstlineno)
        self.names[key] = qual if self.names.get(key, qual) == qual else _AMBIGUOUS
        self._stack.append((qual, is_function))
        if comprehension:
            assert isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp))
            for i, gen in enumerate(node.generators):
                if i:
                    self.visit(gen.iter)
                self.visit(gen.target)
                for cond in gen.ifs:
                    self.visit(cond)
            for part in ("elt", "key", "value"):
                if hasattr(node, part):
                    self.visit(getattr(node, part))
        else:
            for child in body if body is not None else node.body:  # type: ignore[attr-defined]
                self.visit(child)
        self._stack.pop()


def qualnames(source: str) -> dict[tuple[str, int], str]:
    """(co_name, co_firstlineno) -> qualified name, for every scope the source defines. Keys that
    two scopes with different qualified names share are left out."""
    namer = _Namer()
    namer.visit(ast.parse(source))
    return {k: v for k, v in namer.names.items() if v != _AMBIGUOUS}
