"""Composes one BPF program from probe families and compiles it with bcc."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from deepctx.probes.family import PROBES_DIR, ProbeFamily

# bcc compiles with LLVM inside this process; one compilation at a time keeps that safe.
_COMPILE_LOCK = threading.Lock()


def compose_source(families: Sequence[ProbeFamily]) -> str:
    """The program text: each family's include, in order (later families may call earlier helpers)."""
    parts = ["/* composed by deepctx: families " + ", ".join(f.name for f in families) + " */"]
    parts += [f.source() for f in families]
    return "\n".join(parts) + "\n"


def compose_cflags(families: Sequence[ProbeFamily]) -> list[str]:
    flags = [f"-I{PROBES_DIR}", "-Wno-macro-redefined"]
    for fam in families:
        for name, value in fam.defines().items():
            flags.append(f"-D{name}={value}")
    return flags


def render(families: Sequence[ProbeFamily]) -> str:
    """The final source as bcc sees it, with the settings: what `deepctxd --print-bpf` shows."""
    header = "\n".join(f"// cflag {f}" for f in compose_cflags(families))
    return header + "\n" + compose_source(families)


def compile_program(families: Sequence[ProbeFamily]) -> Any:
    from bcc import BPF  # imported late: unit tests and the CLI never need bcc

    with _COMPILE_LOCK:
        return BPF(text=compose_source(families).encode(), cflags=compose_cflags(families))  # bcc wants bytes


def cleanup_program(bpf: Any) -> None:
    with _COMPILE_LOCK:
        bpf.cleanup()
