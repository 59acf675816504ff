"""Launches of a real CUDA runtime from a module laid out as torch.compile's Inductor wrapper ("output code"):
its `call` launches each kernel after a comment naming the graph's source nodes, through a Triton-style
`.run(...)` and `extern_kernels.<op>(...)` as Inductor's code does. No GPU and no PyTorch needed: the launches
fail inside the runtime, the probes count them.

    python compiled_launches.py LIBCUDART WRAPPER N

Prints "ready <pid>", waits for a line on stdin, calls the wrapper's `call` N times, prints "done" and waits.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import types
from typing import Any

GRID = ctypes.c_uint64(1 | (1 << 32))  # dim3 (1, 1, 1)
ONE = ctypes.c_uint32(1)
NO_BYTES = ctypes.c_size_t(0)


class Kernel:
    """A compiled kernel's launcher (Triton's CachingAutotuner.run stands here)."""

    def __init__(self, launch: Any, stub: ctypes.c_void_p) -> None:
        self.launch, self.stub = launch, stub

    def run(self, *args: object, stream: object = None) -> None:
        self.launch(self.stub, GRID, ONE, GRID, ONE, None, NO_BYTES, None)


class AsyncCompile:
    """Inductor's async_compile: its kernels' definitions (their source as text) give the launcher."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel

    def triton(self, name: str, source: str, device_str: str = "") -> Kernel:
        return self.kernel


class Extern(Kernel):
    """extern_kernels: library kernels (cuBLAS's GEMMs) the wrapper calls by operator."""

    def mm(self, *args: object, out: object = None) -> None:
        self.run()

    def addmm(self, *args: object, out: object = None) -> None:
        self.run()


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    n = int(sys.argv[3])
    stub = ctypes.c_void_p(ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value or 0)
    spec = importlib.util.spec_from_file_location("compiled_wrapper", sys.argv[2])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    kernel = Kernel(lib.cudaLaunchKernel, stub)
    mod.__dict__.update(triton_poi_fused_0=kernel, async_compile=AsyncCompile(kernel),
                        extern_kernels=Extern(lib.cudaLaunchKernel, stub),
                        assert_size_stride=lambda *a: None, empty_strided_cuda=lambda *a: None,
                        torch=types.SimpleNamespace(float16="float16", float32="float32"))
    spec.loader.exec_module(mod)
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    for _ in range(n):
        mod.call([])
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
