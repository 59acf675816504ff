"""Turns what the BPF maps aggregated into symbolized call paths (thread, Python, native, kernel)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from deepctx.daemon.symbolize.kernel import KernelSymbols
from deepctx.daemon.symbolize.native import NativeSymbolizer
from deepctx.host.frames import TRUNCATED, UNWIND_LOST, UNWIND_STOPPED, Frame, thread_frame
from deepctx.host.procfs import AddressSpace
from deepctx.host.python.merge import mark_missing_python, merge_stacks

LOST_STACK = Frame("native", "[lost user stack]")

# Reads a native stack id: (IPs leaf first, where the walk was cut): True for the depth limit ([truncated]),
# or the marker that names why it stopped (host/frames.UNWIND_STOPPED, daemon/unwind_stops.py), or False.
StackReader = Callable[[int], tuple[list[int], "bool | Frame"]]


class CallPathResolver:
    """Resolves stack ids to frames, caching per id (many buckets share a native or Python stack).
    One resolver per stack map: the CPU sampler's and the GPU probes' native stack ids differ."""

    def __init__(self, pid: int, space: AddressSpace, read_stack: StackReader, native: NativeSymbolizer,
                 thread_names: dict[int, str], read_python: Callable[[int], list[Any]] | None = None,
                 python_modules: set[str] | None = None, native_python: bool = False,
                 read_kernel_stack: Callable[[int], list[int]] | None = None,
                 native_cache: dict[int, list[Frame]] | None = None,
                 python_names: Mapping[int, str] | None = None) -> None:
        self.pid = pid
        self.space = space
        self.read_stack = read_stack
        self.read_kernel_stack = read_kernel_stack
        self.native = native
        self.read_python = read_python
        self.python_modules = python_modules or set()
        self.thread_names = thread_names
        # host tid -> threading's name for the thread, read while the target runs (host/python/thread_names.py)
        self.python_names = python_names if python_names is not None else {}
        self.native_python = native_python
        # stack id -> frames; a capture passes its own to share what it resolved while still capturing
        self._native_cache: dict[int, list[Frame]] = {} if native_cache is None else native_cache
        self._kernel_cache: dict[int, list[Frame]] = {}
        self._python_cache: dict[int, list[Any]] = {}
        self._path_cache: dict[tuple[int, int, int, bool, int], list[Frame]] = {}
        # stack id -> the first id seen with the same frames (see stack_key)
        self._native_ids: dict[int, int] = {}
        self._native_by_frames: dict[tuple[Frame, ...], int] = {}
        self._python_ids: dict[int, int] = {}
        self._python_by_frames: dict[tuple[Any, ...], int] = {}
        self._ksyms: KernelSymbols | None = None

    @property
    def truncated_stacks(self) -> int:
        """Distinct native stacks cut at the depth limit."""
        return sum(1 for frames in self._native_cache.values() if frames and frames[0] == TRUNCATED)

    @property
    def stopped_stacks(self) -> int:
        """Distinct native stacks whose walk stopped before the thread's entry for a reason other than depth."""
        stops = set(UNWIND_STOPPED.values())
        return sum(1 for frames in self._native_cache.values() if frames and frames[0] in stops)

    def thread(self, tid: int) -> Frame:
        return thread_frame(tid, self.thread_names.get(tid, f"thread {tid}"), self.pid, self.python_names.get(tid))

    def native_frames(self, stack_id: int, lost: bool) -> list[Frame]:
        if lost:
            return [LOST_STACK]
        cached = self._native_cache.get(stack_id)
        if cached is None:
            ips, cut = self.read_stack(stack_id)
            cached = self.native.symbolize_stack(self.pid, self.space, ips)
            if cut and not (cached and cached[0] == UNWIND_LOST):  # garbage past the cut: no depth to tell
                cached.insert(0, cut if isinstance(cut, Frame) else TRUNCATED)
            self._native_cache[stack_id] = cached
        return cached

    def kernel_frames(self, stack_id: int) -> list[Frame]:
        if stack_id < 0 or self.read_kernel_stack is None:
            return []
        cached = self._kernel_cache.get(stack_id)
        if cached is None:
            if self._ksyms is None:
                self._ksyms = KernelSymbols()
            cached = self._ksyms.symbolize_stack(self.read_kernel_stack(stack_id))
            self._kernel_cache[stack_id] = cached
        return cached

    def python_frames(self, py_stack_id: int) -> list[Any]:
        if not py_stack_id or self.read_python is None:
            return []
        cached = self._python_cache.get(py_stack_id)
        if cached is None:
            cached = self.read_python(py_stack_id)
            self._python_cache[py_stack_id] = cached
        return cached

    def stack_key(self, user_stack: int, py_stack: int, lost: bool) -> tuple[int, int]:
        """(native, Python) stack ids standing for every id with the same frames. Distinct ids often
        resolve alike: a native stack cut where its walk went astray keeps none of the garbage that made
        its id new at every call, and Python stacks differ in instruction offsets within one line. Paths
        and tree walks are then done once per distinct path, not once per id (tens of thousands of ids
        for a few thousand paths in a ResNet-50 capture)."""
        native = 0
        if user_stack and not lost:
            native = self._native_ids.get(user_stack, 0)
            if not native:
                frames = tuple(self.native_frames(user_stack, False))
                native = self._native_ids[user_stack] = self._native_by_frames.setdefault(frames, user_stack)
        python = 0
        if py_stack:
            python = self._python_ids.get(py_stack, 0)
            if not python:
                pyframes = tuple(self.python_frames(py_stack))
                python = self._python_ids[py_stack] = self._python_by_frames.setdefault(pyframes, py_stack)
        return native, python

    def path(self, tid: int, user_stack: int, py_stack: int, lost: bool, kernel_stack_id: int = -1) -> list[Frame]:
        """thread, then the merged Python + native frames outermost first, then kernel frames. A new list
        each time (callers trim and extend it); built once per distinct stack (stack_key)."""
        if lost:
            user_stack = 0
        key = (tid, *self.stack_key(user_stack, py_stack, lost), lost, kernel_stack_id)
        cached = self._path_cache.get(key)
        if cached is None:
            cached = self._path_cache[key] = self._build_path(*key)
        return list(cached)

    def _build_path(self, tid: int, user_stack: int, py_stack: int, lost: bool, kernel_stack_id: int) -> list[Frame]:
        frames = [self.thread(tid)]
        native = self.native_frames(user_stack, lost)
        pyframes = self.python_frames(py_stack)
        if pyframes:
            merged = merge_stacks(native, pyframes, self.python_modules, keep_libpython=self.native_python)
            if merged.count(TRUNCATED) > 1:  # native and Python stacks both cut: one marker says it
                merged = [TRUNCATED] + [f for f in merged if f != TRUNCATED]
            frames += merged
        elif self.read_python is not None:  # a Python process: say where its Python frames are missing
            frames += mark_missing_python(native, self.python_modules, keep_libpython=self.native_python)
        else:
            frames += native
        frames += self.kernel_frames(kernel_stack_id)
        return frames
