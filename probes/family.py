"""The lifecycle every probe family follows (CPU sampler, Python stacks, native unwinder, GPU APIs, ...).

A capture session composes one BPF program from the families it needs: each family contributes
C source (its `*.bpf.c` / `*.bpf.h`) and `#define`s, then, once compiled, attaches per target pid,
is polled while the capture runs, and reads back what it aggregated. Families later in the list may
use helpers that earlier ones define (the sampler calls the Python walker and the native unwinder).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from deepctx.host.process_handle import ProcessHandle
    from deepctx.host.procfs import AddressSpace, ProcessInfo

PROBES_DIR = Path(__file__).resolve().parent


def read_source(name: str) -> str:
    """A BPF source file of this folder, marked so compiler errors name the right file and line."""
    path = PROBES_DIR / name
    return f'#line 1 "{path}"\n' + path.read_text()


@dataclass
class Target:
    """One profiled process, as the families see it."""

    pid: int
    info: ProcessInfo
    space: AddressSpace  # refreshed by the session while the capture runs
    warnings: list[str] = field(default_factory=list)  # shown to the user in the profile
    # Per-family state, keyed by family name (e.g. the Python family's interpreter description).
    state: dict[str, Any] = field(default_factory=dict)
    # The process bound by pidfd when the capture was authorized: whoever acts on it by pid number later
    # (the agent's injection) checks with handle.ensure() right before, against pid reuse.
    handle: ProcessHandle | None = None


class ProbeFamily(Protocol):
    name: str

    def source(self) -> str:
        """C source added to the composed program: the text of its `*.bpf.c` / `*.bpf.h`
        (read_source()). Inlined, not #included: bcc only turns functions and map accesses of the
        main file into BPF programs. Plain headers (structs, constants) may be #included."""
        ...

    def defines(self) -> dict[str, int | str]:
        """Settings passed as -D flags: never by editing C text."""
        ...

    def prepare(self, target: Target) -> None:
        """Before compiling: inspect the target (may raise a ValueError with a user-facing reason)."""
        ...

    def attach(self, bpf: Any, target: Target) -> None:
        """After compiling: fill maps for the pid, attach events/uprobes."""
        ...

    def poll(self, bpf: Any, target: Target) -> None:
        """Called about twice a second during the capture (refresh threads, learn new libraries); every
        50 ms while a family that has an optional `busy() -> bool` method returns True."""
        ...

    def detach(self, bpf: Any, target: Target) -> None:
        ...

    def stats(self, bpf: Any) -> dict[str, int]:
        """Counters for the profile's `stats` (lost, dropped, missed, truncated ...)."""
        ...
