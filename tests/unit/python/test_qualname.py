"""3.10's qualified names, rebuilt from source: against co_qualname of 3.11+ interpreters for every
code object of a few stdlib modules, and on the shapes the compiler names specially."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from targets.python.pythons import INTERPRETERS, Interpreter

from deepctx.host.python.qualname import qualnames

DUMP = Path(__file__).with_name("linetable_dump.py")
MODULES = ["json.decoder", "asyncio.base_events", "dataclasses", "argparse", "typing", "collections"]


@pytest.mark.parametrize("interp", [i for i in INTERPRETERS if i.version >= (3, 11)], ids=lambda i: i.id)
def test_matches_co_qualname(interp: Interpreter) -> None:
    if interp.path is None:
        pytest.skip(f"{interp.id} is not installed")
    out = subprocess.run([str(interp.path), str(DUMP), *MODULES], capture_output=True, text=True, check=True)
    tables: dict[str, dict[tuple[str, int], str]] = {}
    checked = 0
    for line in out.stdout.splitlines():
        c = json.loads(line)
        if c["name"] == "<module>":
            continue
        if c["file"] not in tables:
            try:
                tables[c["file"]] = qualnames(Path(c["file"]).read_text())
            except SyntaxError:  # newer syntax than this Python parses (3.12 f-strings); only 3.10 needs it
                tables[c["file"]] = {}
        if not tables[c["file"]]:
            continue
        assert tables[c["file"]].get((c["name"], c["firstlineno"])) == c["qualname"], c
        checked += 1
    assert checked > 300


SOURCE = textwrap.dedent('''\
    import functools

    class A:
        def m(self):
            return [x for x in range(3)]

        class B:
            @staticmethod
            @functools.cache
            def s():
                pass

    def outer(f=lambda: 0):
        class Local:
            def meth(self):
                return (y for y in ())
        def inner():
            return lambda: 1
        return inner

    square = lambda v: v * v
    async def coro():
        pass
''')


def test_scopes() -> None:
    assert qualnames(SOURCE) == {
        ("A", 3): "A",
        ("m", 4): "A.m",
        ("<listcomp>", 5): "A.m.<locals>.<listcomp>",
        ("B", 7): "A.B",
        ("s", 8): "A.B.s",  # a decorated function starts at its first decorator
        ("outer", 13): "outer",
        ("<lambda>", 13): "<lambda>",  # defaults belong to the enclosing scope
        ("Local", 14): "outer.<locals>.Local",
        ("meth", 15): "outer.<locals>.Local.meth",
        ("<genexpr>", 16): "outer.<locals>.Local.meth.<locals>.<genexpr>",
        ("inner", 17): "outer.<locals>.inner",
        ("<lambda>", 18): "outer.<locals>.inner.<locals>.<lambda>",
        ("<lambda>", 21): "<lambda>",
        ("coro", 22): "coro",
    }


def test_ambiguous_keys_are_left_out() -> None:
    src = "def f():\n    return lambda: 0\ndef g(): return 1\nx = [lambda: 1 for _ in ()]; y = lambda: 2\n"
    names = qualnames(src)
    assert ("<lambda>", 4) not in names  # <listcomp>.<locals>.<lambda> and <lambda> share the key
    assert names[("<lambda>", 2)] == "f.<locals>.<lambda>"
