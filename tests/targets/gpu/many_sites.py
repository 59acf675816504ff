"""Source of a Python target that calls the real CUDA runtime from many distinct lines (no GPU needed: the
calls fail, the probes fire): `sites` functions, each calling cudaLaunchKernel `calls` times, each reached
through `depth` recursive frames. It prints "ready <pid>", waits for a line on stdin, makes the calls,
prints "done" and exits at once (tests/integration/python/test_python_exit.py), or with `linger` waits for
stdin to close first (bench/profile_build.py: a capture ended while the process lives)."""

from __future__ import annotations


def source(lib: str, sites: int, calls: int, depth: int, linger: bool = False) -> str:
    lines = ["import ctypes, sys", f"lib = ctypes.CDLL({lib!r})",
             "def launch():",
             "    lib.cudaLaunchKernel(None, ctypes.c_uint64(1), ctypes.c_uint32(1), ctypes.c_uint64(1), None, "
             "ctypes.c_size_t(0), None)"]
    for i in range(sites):  # one function per site: a distinct line and a distinct frame
        lines += [f"def site_{i}():", f"    for _ in range({calls}):", "        launch()"]
    lines += ["def nest(n, fn):", "    return nest(n - 1, fn) if n else fn()",
              "print('ready', __import__('os').getpid(), flush=True)", "sys.stdin.readline()",
              f"for i in range({sites}):", f"    nest({depth}, globals()[f'site_{{i}}'])",
              "print('done', flush=True)"] + (["sys.stdin.read()"] if linger else [])
    return "\n".join(lines) + "\n"
