"""CPU samples taken inside deepctx's own probes, marked so that the profile shows what watching cost.

A probed call traps: the uprobe's breakpoint, the kernel's handling of it and the BPF programs run on the
target's thread, in kernel mode, with the thread's user registers pointing at the probed function's first
instruction (the kernel sets them back to the breakpoint before the programs run; a sample during the trap
itself sees the address after it). A probe on the call's return runs from the kernel's return trampoline,
mapped as `[uprobes]`. A kernel-mode sample whose user stack ends at the first instruction of a GPU API
deepctx probes, or in the `[uprobes]` mapping, is deepctx's time: it gets a `[deepctx probe]` frame below
the call (tests/integration/test_probe_samples.py). The sampler's kernel stacks, where recorded, show the
same time as `asm_exc_int3` ... `uprobe_multi_link_handler`, `bpf_prog_...` below the API's frame.

Not marked: a sample that the hardware took while the trap was being entered (a few instructions), and the
probes on hand-off points and autograd nodes (functions of the frameworks, not GPU APIs).

A sample in the trap before the kernel sets the ip back (offset 1) is unwound with the rule of the instruction
after the breakpoint, which counts a push not yet made: its native callers are lost, its Python line kept
(3 to 6% of the probes' samples on the development VM, 25 to 27% on an H100, where the driver's entry traps
too). Moving such an ip back when a 0xcc precedes it is wrong after the probed instruction ran out of line
(pushed), which shows the same bytes: tried on 2026-12-06, it lost more (57 against 31 to 37)."""

from __future__ import annotations

from deepctx.daemon.callpaths import StackReader
from deepctx.daemon.symbolize.native import NativeSymbolizer, module_name
from deepctx.host.gpu_apis import all_apis
from deepctx.host.procfs import AddressSpace

TRAMPOLINE = "[uprobes]"  # the kernel's mapping of the return trampoline and the out-of-line single steps
# offsets of a sampled user address from a probed function's start: 0 while the probe's programs run, 1 (x86's
# int3 is one byte) while the trap is taken
AT_PROBE = (0, 1)
PROBED = frozenset(a.symbol for a in all_apis())


class ProbeSamples:
    """Which kernel-mode samples' user stacks end inside a probe, by stack id."""

    def __init__(self, pid: int, space: AddressSpace, native: NativeSymbolizer,
                 read_stack: StackReader) -> None:
        self.pid = pid
        self.space = space
        self.native = native
        self.read_stack = read_stack
        self._known: dict[int, bool] = {}

    def in_probe(self, user_stack: int) -> bool:
        found = self._known.get(user_stack)
        if found is None:
            found = self._known[user_stack] = self._leaf_in_probe(user_stack)
        return found

    def _leaf_in_probe(self, user_stack: int) -> bool:
        ips, _ = self.read_stack(user_stack)
        if not ips:
            return False
        leaf = ips[0]
        m = self.space.find(leaf)
        if m is not None and module_name(m) == TRAMPOLINE:
            return True
        hit = self.native.function_offset(self.pid, self.space, leaf)
        return hit is not None and hit[1] in AT_PROBE and hit[0] in PROBED
