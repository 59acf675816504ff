"""Where deepctxd's own CPU time goes: a sampler of its Python threads, for diagnosing the daemon's cost.

Enabled by DEEPCTX_SELF_PROFILE=PATH (off by default: it costs a wake-up and a /proc read per thread 50
times a second). Each tick it takes the stack of every daemon thread that ran since the last tick (its CPU
time in /proc/self/task/TID/schedstat grew), so waits and sleeps are left out, and counts it. Not the
thread's state: a thread running Python is waiting for the GIL, which this sampler holds, whenever the
sampler looks (state S), so a state-R test saw only code that releases the GIL (BPF compiles, syscalls).
When the daemon stops it writes PATH in the folded format flame-graph tools read ("thread;outer;...;inner
count"), preceded by a comment line per thread with the CPU seconds the kernel charged it while sampling.

DEEPCTX_PROFILE_STEPS=DIR also writes a cProfile of each profile's build and message conversion to DIR
(`profiled()`), for the steps between a capture's end and the profile in the client's hands."""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

ENV = "DEEPCTX_SELF_PROFILE"
HZ = 50


def _cpu_ns(tid: int) -> int | None:
    """Nanoseconds one of this process's threads has run on a CPU; None once it has exited."""
    try:
        return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _folded(frame: FrameType | None) -> str:
    names = []
    while frame is not None:
        code = frame.f_code
        names.append(f"{code.co_qualname} ({Path(code.co_filename).name}:{frame.f_lineno})")
        frame = frame.f_back
    return ";".join(reversed(names))


class SelfProfiler:
    def __init__(self, path: str) -> None:
        self.path = path
        self.stacks: Counter[str] = Counter()
        self.cpu: dict[int, tuple[str, int, int]] = {}  # tid -> (name, CPU ns at first sight, last seen)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="self-profile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(1 / HZ):
            threads = {t.ident: t for t in threading.enumerate() if t.native_id is not None}
            for ident, frame in sys._current_frames().items():
                t = threads.get(ident)
                if t is None or ident == me or t.native_id is None:
                    continue
                cpu_ns = _cpu_ns(t.native_id)
                if cpu_ns is None:
                    continue
                _, first, last = self.cpu.get(t.native_id, (t.name, cpu_ns, cpu_ns))
                self.cpu[t.native_id] = (t.name, first, cpu_ns)
                if cpu_ns > last:  # it ran since the last tick
                    self.stacks[f"{t.name};{_folded(frame)}"] += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        lines = [f"# {name} (tid {tid}): {(last - first) / 1e9:.2f} s CPU while sampled"
                 for tid, (name, first, last) in sorted(self.cpu.items(), key=lambda kv: kv[1][1] - kv[1][2])]
        lines += [f"{stack} {n}" for stack, n in self.stacks.most_common()]
        Path(self.path).write_text("\n".join(lines) + "\n")


def start_from_env() -> SelfProfiler | None:
    path = os.environ.get(ENV)
    if not path:
        return None
    p = SelfProfiler(path)
    p.start()
    return p


STEPS_ENV = "DEEPCTX_PROFILE_STEPS"
_step_counts: Counter[str] = Counter()


@contextmanager
def profiled(step: str) -> Iterator[None]:
    """cProfile of the enclosed step into $DEEPCTX_PROFILE_STEPS/STEP-N.pstats (nothing when unset)."""
    folder = os.environ.get(STEPS_ENV)
    if not folder:
        yield
        return
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        _step_counts[step] += 1
        Path(folder).mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(Path(folder, f"{step}-{_step_counts[step]}.pstats")))
