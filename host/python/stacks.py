"""Raw stacks as the BPF walker stores them -> symbolized Python frames."""

from __future__ import annotations

from typing import NamedTuple

from deepctx.host.frames import PYTHON_FREED_CODE, PYTHON_UNKNOWN, PYTHON_UNREADABLE, TRUNCATED, Frame
from deepctx.host.python.code import CodeReader
from deepctx.host.python.pyframe import PyFrameInfo, module_name

# Mirrors probes/python_stack.h
PYSTACK_F_TRUNCATED = 1 << 0
PYSTACK_F_TSTATE_MISS = 1 << 1
PYSTACK_F_READ_ERROR = 1 << 2
PYSTACK_F_MAP_FULL = 1 << 3
PYFRAME_F_ENTRY = 1 << 0
PYFRAME_F_GENERATOR = 1 << 1

UNKNOWN = PYTHON_UNKNOWN
_MISSING = object()


class RawFrame(NamedTuple):
    code: int
    tag: int
    lasti: int
    flags: int  # PYFRAME_F_*


class RawStack(NamedTuple):
    flags: int  # PYSTACK_F_*
    frames: list[RawFrame]  # innermost first, as walked


def symbolize_frame(codes: CodeReader, raw: RawFrame) -> PyFrameInfo | None:
    """None for an incomplete frame (still running its prologue): CPython's tracebacks skip those
    too. An entry frame is kept anyway, since it marks where its eval activation starts."""
    entry = bool(raw.flags & PYFRAME_F_ENTRY)
    info = codes.get(raw.code, raw.tag)
    if info is None:
        freed = codes.failure(raw.code, raw.tag) == "freed"
        return PyFrameInfo(Frame("python", PYTHON_FREED_CODE if freed else UNKNOWN), entry)
    incomplete = (
        info.firsttraceable is not None and not raw.flags & PYFRAME_F_GENERATOR and raw.lasti < info.firsttraceable
    )
    if incomplete and not entry:
        return None
    line = info.line(raw.lasti)
    if line is None or incomplete:
        line = info.firstlineno
    return PyFrameInfo(Frame("python", info.qualname, info.filename, line, module_name(info.filename)), entry)


def symbolize_stack(codes: CodeReader, raw: RawStack) -> list[PyFrameInfo]:
    """Outermost first. A marker stands first for frames the walker did not reach: TRUNCATED past its depth
    limit, PYTHON_UNREADABLE where it could not read a frame (a read error is not a depth limit)."""
    cache = codes.symbolized  # a raw frame names the same line for as long as its code object's tag holds
    out = []
    for r in reversed(raw.frames):
        f = cache.get(r, _MISSING)
        if f is _MISSING:
            f = cache[r] = symbolize_frame(codes, r)
        if f is not None:
            out.append(f)
    if raw.flags & PYSTACK_F_READ_ERROR:
        out.insert(0, PyFrameInfo(PYTHON_UNREADABLE, True))
    elif raw.flags & PYSTACK_F_TRUNCATED:
        out.insert(0, PyFrameInfo(TRUNCATED, True))
    return out


def prefetch(codes: CodeReader, raw: RawStack) -> None:
    """Reads the stack's code objects now, while the process is alive."""
    for r in raw.frames:
        codes.get(r.code, r.tag)
