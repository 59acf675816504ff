"""The torch.compile files recorded on the H100 host (tests/fixtures/torch_compile/): its structured traces are
kept xz-compressed (the fixtures' share of the tree stays small)."""

from __future__ import annotations

import lzma
from pathlib import Path

TORCH_COMPILE = Path(__file__).resolve().parent / "fixtures" / "torch_compile"


def recorded_trace(name: str) -> str:
    """trace_default, trace_break or trace_recompile: the text of the recorded trace."""
    return lzma.decompress((TORCH_COMPILE / f"{name}.log.xz").read_bytes()).decode()
