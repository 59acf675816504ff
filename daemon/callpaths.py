"""Turns what the BPF maps aggregated into symbolized call paths (thread, Python, native, kernel)."""

from __future__ import annotations

from typing import Any

from deepctx.daemon.frames import TRUNCATED, Frame, thread_frame
from deepctx.daemon.procfs import AddressSpace
from deepctx.daemon.symbolize.kernel import KernelSymbols
from deepctx.daemon.symbolize.native import NativeSymbolizer
from deepctx.probes.cpu_sampler import SAMPLE_F_USER_STACK_LOST, CpuSampler

LOST_STACK = Frame("native", "[lost user stack]")


class CallPathResolver:
    """Resolves stack ids to frames, caching per id (many buckets share a native or Python stack)."""

    def __init__(self, bpf: Any, pid: int, space: AddressSpace, sampler: CpuSampler,
                 native: NativeSymbolizer, families: dict[str, Any], thread_names: dict[int, str],
                 native_python: bool = False) -> None:
        self.bpf = bpf
        self.pid = pid
        self.space = space
        self.sampler = sampler
        self.native = native
        self.unwinder = families.get("native_unwind")
        self.python = families.get("python")
        self.thread_names = thread_names
        self.native_python = native_python
        self._native_cache: dict[int, list[Frame]] = {}
        self._kernel_cache: dict[int, list[Frame]] = {}
        self._python_cache: dict[int, list[Any]] = {}
        self._ksyms: KernelSymbols | None = None
        self.truncated_stacks = 0

    def native_frames(self, stack_id: int, flags: int) -> list[Frame]:
        if flags & SAMPLE_F_USER_STACK_LOST:
            return [LOST_STACK]
        cached = self._native_cache.get(stack_id)
        if cached is None:
            if self.unwinder is not None:
                ips, uflags = self.unwinder.stack(self.bpf, stack_id)
                truncated = self.unwinder.is_truncated(uflags)
            else:
                ips, truncated = self.sampler.user_stack(self.bpf, stack_id)
            cached = self.native.symbolize_stack(self.pid, self.space, ips)
            if truncated:
                cached.insert(0, TRUNCATED)
                self.truncated_stacks += 1
            self._native_cache[stack_id] = cached
        return cached

    def kernel_frames(self, stack_id: int) -> list[Frame]:
        if stack_id < 0:
            return []
        cached = self._kernel_cache.get(stack_id)
        if cached is None:
            if self._ksyms is None:
                self._ksyms = KernelSymbols()
            cached = self._ksyms.symbolize_stack(self.sampler.kernel_stack(self.bpf, stack_id))
            self._kernel_cache[stack_id] = cached
        return cached

    def python_frames(self, py_stack_id: int) -> list[Any]:
        if not py_stack_id or self.python is None:
            return []
        cached = self._python_cache.get(py_stack_id)
        if cached is None:
            cached = self.python.frames(self.bpf, None, py_stack_id)
            self._python_cache[py_stack_id] = cached
        return cached

    def path(self, tid: int, user_stack: int, py_stack: int, kernel_stack_id: int, flags: int) -> list[Frame]:
        frames = [thread_frame(tid, self.thread_names.get(tid, f"thread {tid}"))]
        native = self.native_frames(user_stack, flags)
        pyframes = self.python_frames(py_stack)
        if pyframes:
            from deepctx.daemon.python.merge import merge_stacks

            frames += merge_stacks(native, pyframes, self.python.interpreter_modules(self.pid),
                                   keep_libpython=self.native_python)
        else:
            frames += native
        frames += self.kernel_frames(kernel_stack_id)
        return frames
