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
    return "\n".join(lines + _sites_and_main(sites, calls, depth, [], linger)) + "\n"


def _sites_and_main(sites: int, calls: int, depth: int, before_done: list[str], linger: bool) -> list[str]:
    """The sites, each calling launch() `calls` times, and the main part: ready, a line, every site reached
    `depth` frames deep, `before_done`, done, then (linger) wait for stdin to close."""
    lines = []
    for i in range(sites):  # one function per site: a distinct line and a distinct frame
        lines += [f"def site_{i}():", f"    for _ in range({calls}):", "        launch()"]
    return lines + ["def nest(n, fn):", "    return nest(n - 1, fn) if n else fn()",
                    "print('ready', __import__('os').getpid(), flush=True)", "sys.stdin.readline()",
                    f"for i in range({sites}):", f"    nest({depth}, globals()[f'site_{{i}}'])",
                    *before_done, "print('done', flush=True)"] + (["sys.stdin.read()"] if linger else [])


def device_source(mocks: str, sites: int, calls: int, depth: int, kernels: int) -> str:
    """The same shape on the mock CUDA driver, runtime and CUPTI of tests/mocks (the real agent joins their
    activity records): each site launches `kernels` distinct kernels (named host stubs registered with the
    mock driver, 1 us each) `calls` times each through cudaLaunchKernel, so a capture holds sites x kernels
    device buckets, as a training step's many kernels under its many lines do. Lingers until stdin closes."""
    lines = ["import ctypes, os, sys",
             f"cu = ctypes.CDLL(os.path.join({mocks!r}, 'libcuda.so.1'))",
             f"rt = ctypes.CDLL(os.path.join({mocks!r}, 'libcudart.so.13'))",
             "cu.mockRegisterKernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]",
             f"stubs = [ctypes.create_string_buffer(16) for _ in range({kernels})]",
             "for i, s in enumerate(stubs):",
             "    name = f'k{i}'",
             "    cu.mockRegisterKernel(ctypes.addressof(s), f'_Z{len(name)}{name}Pf'.encode(), 1000)",
             "STUBS = [ctypes.c_void_p(ctypes.addressof(s)) for s in stubs]",
             "class Dim3(ctypes.Structure):",
             "    _fields_ = [('x', ctypes.c_uint), ('y', ctypes.c_uint), ('z', ctypes.c_uint)]",
             "GRID, BLOCK = Dim3(4, 1, 1), Dim3(128, 1, 1)",
             "cu.cuInit(0)",
             "def launch():",
             "    for s in STUBS:",
             "        rt.cudaLaunchKernel(s, GRID, BLOCK, None, ctypes.c_size_t(0), None)"]
    return "\n".join(lines + _sites_and_main(sites, calls, depth, ["rt.cudaDeviceSynchronize()"], True)) + "\n"
