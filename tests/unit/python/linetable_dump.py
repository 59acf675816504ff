"""Run by each installed interpreter (any 3.10+): prints, as JSON lines, the raw line table of
every code object in a few stdlib modules together with the line CPython itself gives each code
unit (co_positions on 3.11+, co_lines on 3.10), for the decoders to be checked against."""

import importlib
import json
import sys


def walk(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_code"):
            yield from walk(c)


def expected_lines(code):
    n = len(code.co_code) // 2
    if sys.version_info >= (3, 11):
        return [p[0] for p in code.co_positions()][:n]
    out = [None] * n
    for start, end, line in code.co_lines():
        for i in range(start // 2, min(end // 2, n)):
            out[i] = line
    return out


for name in sys.argv[1:]:
    mod = importlib.import_module(name)
    with open(mod.__file__, "rb") as f:
        top = compile(f.read(), mod.__file__, "exec")
    for code in walk(top):
        print(json.dumps({
            "module": name,
            "file": mod.__file__,
            "qualname": getattr(code, "co_qualname", code.co_name),
            "name": code.co_name,
            "firstlineno": code.co_firstlineno,
            "table": code.co_linetable.hex(),
            "lines": expected_lines(code),
        }))
