"""Raw walker stacks -> Python frames: order, incomplete frames, unknown code, truncation markers,
and the short module names frames carry."""

from __future__ import annotations

import pytest

from deepctx.host.frames import PYTHON_UNREADABLE, TRUNCATED, Frame
from deepctx.host.python.code import CodeInfo
from deepctx.host.python.linetable import line_ranges
from deepctx.host.python.pyframe import PyFrameInfo, module_name
from deepctx.host.python.stacks import (
    PYFRAME_F_ENTRY,
    PYFRAME_F_GENERATOR,
    PYSTACK_F_READ_ERROR,
    PYSTACK_F_TRUNCATED,
    RawFrame,
    RawStack,
    symbolize_stack,
)

# 4 code units on line firstlineno + 1, then 4 on + 2 (3.11+ location table, no-column entries)
TABLE = bytes([0x80 | (13 << 3) | 3, 0x02, 0x80 | (13 << 3) | 3, 0x02])


def info(name: str, first: int, firsttraceable: int | None = 2) -> CodeInfo:
    return CodeInfo(name.rsplit(".", 1)[-1], name, "/app/train.py", first, firsttraceable,
                    line_ranges("locations", TABLE, first))


class FakeCodes:
    def __init__(self) -> None:
        self.objects = {(0x100, 1): info("main", 10), (0x200, 2): info("Model.step", 20), (0x300, 3): info("loss", 30)}
        self.symbolized: dict = {}
        self.reads = 0

    def get(self, addr: int, tag: int) -> CodeInfo | None:
        self.reads += 1
        return self.objects.get((addr, tag))

    def failure(self, addr: int, tag: int) -> str | None:
        return {0x300: "freed", 0x400: "exited"}.get(addr) if (addr, tag) not in self.objects else None


def names(frames: list[PyFrameInfo]) -> list[str]:
    return [f.frame.name for f in frames]


def test_outermost_first_with_lines_and_entries() -> None:
    raw = RawStack(0, [RawFrame(0x300, 3, 5, 0), RawFrame(0x200, 2, 2, PYFRAME_F_ENTRY), RawFrame(0x100, 1, 7, PYFRAME_F_ENTRY)])
    out = symbolize_stack(FakeCodes(), raw)  # type: ignore[arg-type]
    assert out == [
        PyFrameInfo(Frame("python", "main", "/app/train.py", 12, "train"), True),
        PyFrameInfo(Frame("python", "Model.step", "/app/train.py", 21, "train"), True),
        PyFrameInfo(Frame("python", "loss", "/app/train.py", 32, "train"), False),
    ]


def test_a_frame_shared_by_stacks_is_symbolized_once() -> None:
    """Stacks share most of their frames (the outer ones): each raw frame is named once per process, while
    one more instruction offset in the same code is named on its own (another line)."""
    codes = FakeCodes()
    outer = [RawFrame(0x200, 2, 2, PYFRAME_F_ENTRY), RawFrame(0x100, 1, 7, PYFRAME_F_ENTRY)]
    a = symbolize_stack(codes, RawStack(0, [RawFrame(0x300, 3, 2, 0), *outer]))  # type: ignore[arg-type]
    b = symbolize_stack(codes, RawStack(0, [RawFrame(0x300, 3, 5, 0), *outer]))  # type: ignore[arg-type]
    assert [f.frame.line for f in a] == [12, 21, 31] and [f.frame.line for f in b] == [12, 21, 32]
    assert codes.reads == 4 and len(codes.symbolized) == 4


def test_incomplete_frame_is_hidden_unless_it_starts_an_activation() -> None:
    codes = FakeCodes()
    hidden = RawStack(0, [RawFrame(0x300, 3, 1, 0), RawFrame(0x100, 1, 3, PYFRAME_F_ENTRY)])
    assert names(symbolize_stack(codes, hidden)) == ["main"]  # type: ignore[arg-type]
    kept = RawStack(0, [RawFrame(0x300, 3, -1, PYFRAME_F_ENTRY), RawFrame(0x100, 1, 3, PYFRAME_F_ENTRY)])
    out = symbolize_stack(codes, kept)  # type: ignore[arg-type]
    assert names(out) == ["main", "loss"] and out[1].frame.line == 30  # shows its first line
    gen = RawStack(0, [RawFrame(0x300, 3, 0, PYFRAME_F_GENERATOR), RawFrame(0x100, 1, 3, PYFRAME_F_ENTRY)])
    assert names(symbolize_stack(codes, gen)) == ["main", "loss"]  # type: ignore[arg-type]


def test_unreadable_code_objects_are_named_by_cause_never_garbage() -> None:
    """A process that exited took its code objects with it: [unknown]; in a running process the code object at
    that address was freed (another object, or no memory, there now): [code object freed]."""
    raw = RawStack(0, [RawFrame(0x400, 99, 5, 0), RawFrame(0x300, 99, 5, 0), RawFrame(0x100, 1, 3, PYFRAME_F_ENTRY)])
    out = symbolize_stack(FakeCodes(), raw)  # type: ignore[arg-type]
    assert out[1:] == [PyFrameInfo(Frame("python", "[code object freed]"), False),
                       PyFrameInfo(Frame("python", "[unknown]"), False)]


@pytest.mark.parametrize(("flag", "marker"), [(PYSTACK_F_TRUNCATED, TRUNCATED),
                                              (PYSTACK_F_READ_ERROR, PYTHON_UNREADABLE),
                                              (PYSTACK_F_TRUNCATED | PYSTACK_F_READ_ERROR, PYTHON_UNREADABLE)])
def test_incomplete_stacks_start_with_the_marker_of_their_cause(flag: int, marker: Frame) -> None:
    """Only the depth limit is [truncated]; a frame the walker could not read says so."""
    out = symbolize_stack(FakeCodes(), RawStack(flag, [RawFrame(0x300, 3, 5, 0)]))  # type: ignore[arg-type]
    assert out[0] == PyFrameInfo(marker, True) and names(out) == [marker.name, "loss"]


@pytest.mark.parametrize(("filename", "module"), [
    ("/usr/lib/python3.11/json/decoder.py", "json.decoder"),
    ("/usr/lib/python3.11/asyncio/__init__.py", "asyncio"),
    ("/root/.pyenv/versions/3.13.0/lib/python3.13/threading.py", "threading"),
    ("/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "torch.nn.modules.linear"),
    ("/usr/lib/python3/dist-packages/numpy/core/numeric.py", "numpy.core.numeric"),
    ("/home/me/train.py", "train"),
    ("<frozen importlib._bootstrap>", "importlib._bootstrap"),
    ("<string>", None),
])
def test_module_names(filename: str, module: str | None) -> None:
    assert module_name(filename) == module

