"""One process's compiled-code sources, read while it runs: for torch.compile, the Inductor wrapper modules its
launches came from (met as Python frames) and its structured trace (`TORCH_TRACE`); for JAX, the optimized HLO
modules XLA dumps (`XLA_FLAGS=--xla_dump_to=DIR`). Each read as the process's owner could (host/target_files.py)
and parsed as text (host/torch_compile.py, host/xla_dump.py)."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

from deepctx.host.frames import is_library_file
from deepctx.host.inductor_traffic import launch_traffic
from deepctx.host.procfs import environ_value, namespace_pid
from deepctx.host.target_files import TargetRoot, read_target_file
from deepctx.host.torch_compile import (
    MAX_TRACE_BYTES,
    Compile,
    CompileTrace,
    LaunchSite,
    SourceLine,
    complete_part,
    is_backward_wrapper,
    parse_trace,
    parse_wrapper,
)
from deepctx.host.xla_dump import AFTER_OPTIMIZATIONS, HloModule, parse_module

MAX_WRAPPER_BYTES = 16 << 20
TRACE_PREFIX = "dedicated_log_torch_trace"
REFRESH_S = 10.0  # a trace read again at most this often while the capture runs (compiles come in bursts)
MAX_TRACE_FILES = 16
MAX_XLA_FILES = 4096  # names listed in a dump directory (each module leaves several files)
MAX_XLA_MODULE_BYTES = 64 << 20
_XLA_DUMP_TO = re.compile(r"--xla_dump_to=(\S+)")


def xla_dump_dir(xla_flags: str | None) -> str | None:
    """Where XLA_FLAGS has XLA dump its modules (an absolute directory; "sponge" and relative paths: None)."""
    m = _XLA_DUMP_TO.search(xla_flags or "")
    return m.group(1) if m and m.group(1).startswith("/") else None


@dataclass(frozen=True)
class LaunchOrigin:
    """What a launch at a wrapper line came from: the site's nodes and operators, and their model lines (empty
    without a trace that knows the wrapper)."""

    wrapper: str  # Inductor's wrapper module, or XLA's dumped module file
    site: LaunchSite  # XLA: its JAX operations as nodes, no ATen operators
    lines: tuple[SourceLine, ...]
    compile_id: str | None  # Inductor's compile id, or the XLA module's name
    framework: str = "inductor"  # or "xla"
    bytes_per_launch: int | None = None  # the least memory traffic of one launch (host/inductor_traffic.py)


class CompiledSources:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.wrappers: dict[str, dict[int, LaunchSite]] = {}
        self.traffic: dict[str, dict[int, int]] = {}  # wrapper -> launch line -> its least bytes
        self.backward: set[str] = set()  # the wrappers of backward graphs
        self.trace_dir = environ_value(pid, "TORCH_TRACE")
        self.ns_pid = namespace_pid(pid)  # the pid the process's own trace records carry
        self.xla_dir = xla_dump_dir(environ_value(pid, "XLA_FLAGS"))
        self.xla_modules: dict[str, HloModule] = {}  # dumped module file -> what it says
        # the trace is read once more at the capture's end, often the process's exit: its root is held open
        self.root: TargetRoot | None = TargetRoot(pid) if self.trace_dir or self.xla_dir else None
        self._traces: dict[str, tuple[int, CompileTrace]] = {}  # trace file -> (bytes parsed, what they say)
        self._read_at = 0.0
        self.trace_reads = 0

    def see(self, filename: str) -> None:
        """A wrapper module met on a call path: read once, and the trace again (it names the new compile)."""
        if filename in self.wrappers:
            return
        data = read_target_file(self.pid, filename, MAX_WRAPPER_BYTES)
        text = data.decode("utf-8", errors="replace") if data else ""
        self.wrappers[filename] = parse_wrapper(text)
        self.traffic[filename] = launch_traffic(text)
        if is_backward_wrapper(text):
            self.backward.add(filename)
        self.refresh(force=True)

    def refresh(self, force: bool = False, final: bool = False) -> None:
        """Reads what the trace's files gained since the last read (whole records only, unless final: the
        process is done writing): every REFRESH_S at most unless forced."""
        now = time.monotonic()
        root = self.root
        due = bool(self.wrappers or self.xla_dir) and now - self._read_at >= REFRESH_S
        if root is None or not (force or due):
            return
        self._read_at = now
        if self.xla_dir:
            self._read_xla(root)
        if not self.trace_dir:
            return
        names = root.listdir(self.trace_dir) or []
        for name in [n for n in names if n.startswith(TRACE_PREFIX) and n.endswith(".log")][:MAX_TRACE_FILES]:
            path = os.path.join(self.trace_dir, name)
            done, trace = self._traces.get(path, (0, CompileTrace()))
            data = root.read(path, MAX_TRACE_BYTES, offset=done)
            if not data:
                continue
            whole = len(data) if final else complete_part(data)
            if whole == 0:
                continue
            parse_trace(data[:whole].decode("utf-8", errors="replace"), is_library_file, into=trace)
            self._traces[path] = (done + whole, trace)
            self.trace_reads += 1

    def _read_xla(self, root: TargetRoot) -> None:
        """The modules XLA dumped since the last read (each file once, when it is whole: it ends its last
        computation)."""
        assert self.xla_dir is not None
        for name in root.listdir(self.xla_dir, MAX_XLA_FILES) or []:
            path = os.path.join(self.xla_dir, name)
            if path in self.xla_modules or not AFTER_OPTIMIZATIONS.search(name):
                continue
            data = root.read(path, MAX_XLA_MODULE_BYTES)
            if data is None or not data.rstrip().endswith(b"}"):
                continue  # unreadable, or still being written
            module = parse_module(data.decode("utf-8", errors="replace"))
            if module is not None:
                self.xla_modules[path] = module

    def xla_origin(self, kernel: str, path: set[tuple[str, int]]) -> LaunchOrigin | None:
        """A JAX kernel's fusion: in the one module that has a fusion of that name, or, where several have
        (`loop_add_fusion` is in most), the one whose traced stacks hold the most of the kernel's call path's
        Python lines (the line that called the jitted function is in its module's stacks); None when that does not
        decide."""
        found = [(p, m) for p, m in self.xla_modules.items() if kernel in m.fusions]
        if len(found) > 1:
            scored = sorted(((len(m.locations & path), p, m) for p, m in found), key=lambda x: -x[0])
            if scored[0][0] == 0 or (len(scored) > 1 and scored[1][0] == scored[0][0]):
                return None
            found = [(scored[0][1], scored[0][2])]
        if not found:
            return None
        path_name, module = found[0]
        f = module.fusions[kernel]
        return LaunchOrigin(path_name, LaunchSite(f.ops, ()), f.lines, module.name, "xla")

    def close(self) -> None:
        """The capture's end: the trace read a last time, the root let go."""
        if self.root is not None:
            self.refresh(force=True, final=True)
            self.root.close()
            self.root = None

    def origin(self, filename: str, line: int) -> LaunchOrigin | None:
        site = self.wrappers.get(filename, {}).get(line)
        if site is None:
            return None
        traffic = self.traffic.get(filename, {}).get(line)
        traces = self._traces_newest_first()
        for trace in sorted(traces, key=lambda t: t.pid != self.ns_pid):  # this process's own trace first
            cid = trace.output_code.get(filename)
            if cid is not None:
                lines = trace.lines(filename, site, filename in self.backward)
                return LaunchOrigin(filename, site, tuple(lines), cid, bytes_per_launch=traffic)
        return LaunchOrigin(filename, site, (), None, bytes_per_launch=traffic)

    def compiles(self) -> list[Compile]:
        """Every compile this process's trace records. A directory may hold the traces of other processes (the
        ranks of one job, earlier runs): each record names its writer's pid; without one, the file that names
        this process's wrappers."""
        traces = self._traces_newest_first()
        mine = [t for t in traces if t.pid is not None and t.pid == self.ns_pid]
        if not mine:
            mine = [t for t in traces if any(w in t.output_code for w in self.wrappers)][:1]
        if not mine and len(traces) == 1:  # one file, whose writer is not known to be another process
            mine = traces
        return [c for t in mine for c in sorted(t.compiles.values(), key=_compile_order)]

    def _traces_newest_first(self) -> list[CompileTrace]:
        return [t for _, t in reversed(list(self._traces.values()))]


def _compile_order(c: Compile) -> tuple[int, int]:
    frame, _, attempt = c.compile_id.partition("/")
    return (int(frame) if frame.isdigit() else 1 << 30, int(attempt) if attempt.isdigit() else 1 << 30)
