"""The CPython interpreters the Python tests run their targets on: the system's python3 and pyenv's
3.10-3.14 where installed (tests skip the ones that are not)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Interpreter:
    id: str
    version: tuple[int, int]
    path: Path | None  # None: not installed here


def _patch(p: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", p.parts[-3]))


def _pyenv(minor: int) -> Path | None:
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    # plain builds only: 3.13t (free-threaded) and debug builds have other directory names
    found = [p for p in root.glob(f"3.{minor}.*/bin/python") if re.fullmatch(rf"3\.{minor}\.\d+", p.parts[-3])]
    return max(found, key=_patch) if found else None


def _system() -> Interpreter | None:
    exe = Path("/usr/bin/python3")
    if not exe.exists():
        return None
    m = re.fullmatch(r"python(\d+)\.(\d+)", exe.resolve().name)
    if not m:
        return None
    return Interpreter(f"system-{m[1]}.{m[2]}", (int(m[1]), int(m[2])), exe.resolve())


INTERPRETERS: list[Interpreter] = [i for i in [_system()] if i is not None] + [
    Interpreter(f"pyenv-3.{minor}", (3, minor), _pyenv(minor)) for minor in (10, 11, 12, 13, 14)
]
