"""The torch.compile files recorded on the H100 host (tests/fixtures/torch_compile/): its structured traces and
Inductor's generated wrappers are kept xz-compressed (the fixtures' share of the tree stays small)."""

from __future__ import annotations

import lzma
from pathlib import Path

TORCH_COMPILE = Path(__file__).resolve().parent / "fixtures" / "torch_compile"


def recorded_trace(name: str) -> str:
    """trace_default, trace_break or trace_recompile: the text of the recorded trace."""
    return lzma.decompress((TORCH_COMPILE / f"{name}.log.xz").read_bytes()).decode()


class RecordedWrapper:
    """An Inductor wrapper module recorded on the H100 (<name>.py.xz): its text, and its name as Inductor gave it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = TORCH_COMPILE / name  # where it would be: wrapper files are recognized by their name

    def read_text(self) -> str:
        return lzma.decompress((TORCH_COMPILE / f"{self.name}.xz").read_bytes()).decode()

    def __str__(self) -> str:
        return str(self.path)
