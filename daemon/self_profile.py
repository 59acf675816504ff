"""Where deepctxd's own CPU time goes: a sampler of its Python threads, for diagnosing the daemon's cost.

Enabled by DEEPCTX_SELF_PROFILE=PATH (off by default: it costs a wake-up and a /proc read per thread 50
times a second). Each tick it takes the stack of every daemon thread that the kernel shows running
(state R in /proc/self/task/TID/stat), so waits and sleeps are left out, and counts it. When the daemon
stops it writes PATH in the folded format flame-graph tools read ("thread;outer;...;inner count"),
preceded by a comment line per thread with the CPU seconds the kernel charged it while sampling."""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType

ENV = "DEEPCTX_SELF_PROFILE"
HZ = 50


def _stat(tid: int) -> tuple[str, float] | None:
    """(scheduler state, CPU seconds so far) of one of this process's threads; None once it has exited."""
    try:
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


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
        self.cpu: dict[int, tuple[str, float, float]] = {}  # tid -> (name, CPU s at first sight, last seen)
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
                st = _stat(t.native_id)
                if st is None:
                    continue
                state, cpu_s = st
                self.cpu[t.native_id] = (t.name, self.cpu.get(t.native_id, (t.name, cpu_s, cpu_s))[1], cpu_s)
                if state == "R":
                    self.stacks[f"{t.name};{_folded(frame)}"] += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        lines = [f"# {name} (tid {tid}): {last - first:.2f} s CPU while sampled"
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
