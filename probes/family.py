"""The lifecycle every probe family follows (CPU sampler, Python stacks, native unwinder, GPU APIs, device
activity, ...): load, attach(process), read or window, contribute to the tree, detach.

A program is composed from the families a capture needs: each family contributes C source (its `*.bpf.c` /
`*.bpf.h`) and `#define`s. The defines carry the daemon's settings only (map sizes): what a capture or a
target asks for (rate, kernel stacks, modes, trace, the pid's interpreter layout ...) goes into maps at
attach, so the program text is the same for every capture of its kind, and probes/programs.py compiles and
loads it once per daemon (load: the verifier runs there) and hands it from capture to capture. Families
later in the list may use helpers that earlier ones define (the sampler calls the Python walker and the
native unwinder).

The steps, in the order daemon/capture.py drives them (it names no family; daemon/probe_set.py chooses
them and reads what they aggregated into the tree):
  prepare(target)        before a program is taken: inspect the target (ValueError: a user-facing reason)
  before_compile()       when a program must be compiled for it: what its text refers to is made first
  load(bpf)              once per program: load its BPF functions (not per capture)
  attach(bpf, target)    fill the maps for the pid and attach events / uprobes
  poll(bpf, target)      while the capture runs; busy() asks for faster polls
  take_window(bpf, target, cut) / clear_window(bpf, target, stacks_free)   continuous mode, around each
                         window's build (cut: the window boundary's number, the same for every capture on
                         the program; stacks_free: none of them has counts left to build: program_share.py)
  finish(bpf, target, exited)            sampling ends (stop events, the agent's last records)
  stats(bpf)             counters for the profile
  detach(bpf, target)    take the pid's entries out of the maps, close its events: the program goes back
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
        """Settings passed as -D flags: never by editing C text. The daemon's (sizes) only: the same for
        every capture, or each capture compiles a program of its own."""
        ...

    def before_compile(self) -> None:
        """Right before its program is compiled (under the compile lock): what the program's text refers to
        outside it exists (the native unwinder's arrays the daemon shares: probes/unwind_maps.py)."""
        ...

    def load(self, bpf: Any) -> None:
        """Once per compiled program: load the BPF functions it attaches (bpf.load_func), so the verifier
        runs when the program is built, not in a capture."""
        ...

    def prepare(self, target: Target) -> None:
        """Before a program is taken: inspect the target (may raise a ValueError with a user-facing reason)."""
        ...

    def attach(self, bpf: Any, target: Target) -> None:
        """Fill maps for the pid (its settings included), attach events/uprobes."""
        ...

    def poll(self, bpf: Any, target: Target) -> None:
        """Called about twice a second during the capture (refresh threads, learn new libraries); every
        50 ms while busy() says so."""
        ...

    def busy(self) -> bool:
        ...

    def take_window(self, bpf: Any, target: Target, cut: int) -> None:
        """Continuous mode, at a window's cut: the target's counts of this window leave the maps (the
        program's other captures cut at the same instants: probes/program_share.py)."""
        ...

    def clear_window(self, bpf: Any, target: Target, stacks_free: bool) -> None:
        """Continuous mode, after the window was built; stack maps are emptied only where stacks_free (no
        capture on the program has counts left to build that name their ids)."""
        ...

    def finish(self, bpf: Any, target: Target, exited: bool) -> None:
        """Sampling ends (exited: the target is gone): stop events, take the last records."""
        ...

    def detach(self, bpf: Any, target: Target) -> None:
        """Take the pid out of the maps and close its events: the program serves other captures after."""
        ...

    def stats(self, bpf: Any) -> dict[str, int]:
        """Counters for the profile's `stats` (lost, dropped, missed, truncated ...)."""
        ...


class FamilyDefaults:
    """The steps a family may leave out, as no-ops (a family inherits this and overrides what it does)."""

    def before_compile(self) -> None:
        pass

    def load(self, bpf: Any) -> None:
        pass

    def poll(self, bpf: Any, target: Target) -> None:
        pass

    def busy(self) -> bool:
        return False

    def take_window(self, bpf: Any, target: Target, cut: int) -> None:
        pass

    def clear_window(self, bpf: Any, target: Target, stacks_free: bool) -> None:
        pass

    def finish(self, bpf: Any, target: Target, exited: bool) -> None:
        pass
