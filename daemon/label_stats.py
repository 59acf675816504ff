"""The synthetic frames of a finished tree ([truncated], [unknown], [unnamed kernel] ...): how many samples (or
GPU calls) stand under each, as stats, and one warning per cause that names it (docs/formats.md, "Special
names"). Counted from the tree, so each window of a continuous capture counts its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from deepctx.daemon.gpu_tree import NEEDS_AGENT_KERNEL, NOT_SAMPLED, UNNAMED_KERNEL
from deepctx.daemon.tree import CallTree
from deepctx.host.frames import (
    DEEPCTX_PROBE,
    PYTHON_FREED_CODE,
    PYTHON_MISSING,
    PYTHON_UNKNOWN,
    PYTHON_UNREADABLE,
    TRUNCATED,
    UNMAPPED,
    UNWIND_LOST,
    UNWIND_STOPPED,
    Frame,
)


@dataclass(frozen=True)
class Label:
    key: str  # stats cpu_samples_<key> and gpu_calls_<key>
    matches: Callable[[Frame], bool]
    warning: str | None  # "{what}": "N CPU samples (P% of the profile) and M GPU calls"; None: another warning says it

    @property
    def stats(self) -> tuple[str, str]:
        return f"cpu_samples_{self.key}", f"gpu_calls_{self.key}"


_STOPS = {f.name for f in UNWIND_STOPPED.values()}

LABELS = (
    Label("truncated", lambda f: f == TRUNCATED,
          "[truncated] on {what}: a call path deeper than the walkers' depth limit loses its outermost frames there "
          "(native: kernel.perf_event_max_stack or the unwinder's depth; Python: python_max_depth)"),
    Label("python_unreadable", lambda f: f == PYTHON_UNREADABLE,
          "[Python walk stopped: unreadable frame] on {what}: the Python walker could not read a frame or its code "
          "object at the sample (a page not resident, which BPF cannot fault in, or a frame still being set up; "
          "see python_read_errors), so the Python frames above it are missing"),
    Label("python_missing", lambda f: f == PYTHON_MISSING,
          "[Python frames missing] on {what}: the thread was running Python code but the Python walker had no "
          "stack for it: it found no thread state for the thread (python_tstate_misses: a sub-interpreter's "
          "thread, or one deeper in the interpreter's thread list than the walker searches) or the stack map was "
          "full (python_stack_map_full)"),
    Label("unwinding_stopped", lambda f: f.kind == "native" and f.name in _STOPS,
          "[unwinding stopped: …] on {what}: the native unwinder stopped before the thread's entry for the reason "
          "named: code with no unwind table, an unreadable stack, an unwind rule it cannot evaluate"),
    Label("unwind_lost", lambda f: f == UNWIND_LOST,
          "[unwinding lost the callers] on {what}: a frame-pointer walk left executable memory (code built without "
          "frame pointers), so the native callers above are unknown"),
    Label("python_unknown", lambda f: f.kind == "python" and f.name == PYTHON_UNKNOWN,
          "[unknown] Python frames on {what}: the process had exited before deepctxd read their code objects (call "
          "paths first seen in its last moments)"),
    Label("python_freed_code", lambda f: f.kind == "python" and f.name == PYTHON_FREED_CODE,
          "[code object freed] Python frames on {what}: the process was running, but their code objects were freed "
          "before deepctxd read them (code made and dropped at run time: exec, eval, functions built per call; or "
          "call paths read late, see python_new_stacks_lost)"),
    Label("unmapped", lambda f: f.kind == "native" and f.name.startswith(UNMAPPED + "+"),
          "[unmapped]+0x… frames on {what}: code at addresses no mapping held when deepctxd read the process's maps "
          "(JIT code, or a library loaded and unloaded between reads)"),
    Label("user_stack_lost", lambda f: f.name == "[lost user stack]", None),  # said by cpu_user_stacks_lost's
    Label("in_probes", lambda f: f == DEEPCTX_PROBE,
          "[deepctx probe] on {what}: the target's threads were in deepctx's own probes at GPU calls (the uprobe's "
          "trap and its BPF programs): what watching cost them. The analyzer does not count it as the program's "
          "host time; sampled mode, or exact mode's --gpu-duty, costs less"),
    Label("not_sampled", lambda f: f == NOT_SAMPLED,
          "[call path not sampled] on {what}: sampled mode took no call path for any call of that API, kernel and "
          "launch shape, so those calls are counted without one (see gpu_calls_without_call_path)"),
)
UNNAMED_KERNEL_STAT = "gpu_calls_unnamed_kernel"
NEEDS_AGENT_STAT = "gpu_calls_kernel_named_by_agent_only"
KERNEL_STATS = {UNNAMED_KERNEL: UNNAMED_KERNEL_STAT, NEEDS_AGENT_KERNEL: NEEDS_AGENT_STAT}
STATS = frozenset({st for lab in LABELS for st in lab.stats} | set(KERNEL_STATS.values()))
METRICS = ("cpu_samples", "calls")


def label_stats(tree: CallTree) -> dict[str, int]:
    """CPU samples and GPU API calls under each synthetic frame (a path counted once per label), and launches of
    unnamed kernels; only the nonzero ones (a profile without labels gets no extra stats)."""
    nodes = tree.nodes
    order = list(tree.preorder())
    total = [[0, 0] for _ in nodes]
    for idx in reversed(order):  # children before parents
        t = total[idx]
        for i, m in enumerate(METRICS):
            t[i] += nodes[idx].metrics.get(m, 0)
        if nodes[idx].parent >= 0:
            up = total[nodes[idx].parent]
            up[0] += t[0]
            up[1] += t[1]
    out = dict.fromkeys(STATS, 0)
    under: dict[int, frozenset[str]] = {}  # node -> labels on its path, itself included
    for idx in order:
        node = nodes[idx]
        above = under.get(node.parent, frozenset())
        here = above
        for lab in LABELS:
            if lab.key not in above and lab.matches(node.frame):
                samples, calls = lab.stats
                out[samples] += total[idx][0]
                out[calls] += total[idx][1]
                here = here | {lab.key}
        under[idx] = here
        if node.frame.kind == "kernel" and node.frame.name in KERNEL_STATS:
            out[KERNEL_STATS[node.frame.name]] += node.metrics.get("calls", 0)
    return {k: v for k, v in out.items() if v}


def label_warnings(stats: dict[str, int]) -> list[str]:
    in_profile = stats.get("cpu_samples_in_profile") or 0
    out = []
    for lab in LABELS:
        samples, calls = (stats.get(st, 0) for st in lab.stats)
        if not lab.warning or not (samples or calls):
            continue
        what = []
        if samples:
            what.append(_count(samples, "CPU sample") + (f" ({100 * samples / in_profile:.1f}% of the profile)"
                                                         if in_profile else ""))
        if calls:
            what.append(_count(calls, "GPU call"))
        out.append(lab.warning.format(what=" and ".join(what)))
    if stats.get(UNNAMED_KERNEL_STAT):
        out.append(f"[unnamed kernel] on {_count(stats[UNNAMED_KERNEL_STAT], 'kernel launch', 'es')}: the runtime "
                   "passed no kernel name deepctxd could resolve")
    if stats.get(NEEDS_AGENT_STAT):
        out.append(f"{NEEDS_AGENT_KERNEL} on {_count(stats[NEEDS_AGENT_STAT], 'kernel launch', 'es')}: their kernel "
                   "handles were made before the capture and hold no name deepctxd could read; the device-activity "
                   "agent's records name them (`deepctx run`, or `attach --gpu-activity` to a process started "
                   "with the agent)")
    return out


def _count(n: int, noun: str, plural: str = "s") -> str:
    return f"{n} {noun}{'' if n == 1 else plural}"
