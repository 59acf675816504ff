"""Probed GPU calls at a steady rate, for bench/attach_latency.py: the "next call" that proves a capture ready.

    python steady_calls.py cudart LIBCUDART [--period S]
    python steady_calls.py torch|torch_cpu|jax [--period S]

cudart: the real CUDA runtime loaded through ctypes (pip's nvidia-cuda-runtime), cudaLaunchKernel called in a
loop; without a GPU each call fails, but the uprobes fire on the real entry point (as in
tests/targets/gpu/runtime_calls.py). torch: a small MLP training step (forward, backward, SGD) on the GPU.
torch_cpu: the same on the CPU, for a host without a GPU (a CUDA build still loads its CUDA libraries).
jax: a jitted matmul step. Each warms up (libraries loaded, kernels compiled), prints "ready <pid>", then makes
one call or step every --period seconds (default 0.002) until stdin closes, and exits 0.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable


def cudart_step(lib_path: str) -> Callable[[], None]:
    lib = ctypes.CDLL(lib_path)
    # any address serves as a "host stub" without a GPU: this one is a function with a known name
    stub = ctypes.c_void_p(ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value or 0)
    grid = ctypes.c_uint64(1 | (1 << 32))  # dim3 (1, 1, 1): x and y in one eightbyte, z in the next

    def step() -> None:
        lib.cudaLaunchKernel(stub, grid, ctypes.c_uint32(1), grid, ctypes.c_uint32(1), None, ctypes.c_size_t(0), None)

    return step


def torch_step() -> Callable[[], None]:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(128, 512, device="cuda")
    y = torch.randn(128, 512, device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        torch.cuda.synchronize()

    return step


def torch_cpu_step() -> Callable[[], None]:
    """The MLP's step on the CPU: a CUDA build of PyTorch loads its CUDA libraries (libtorch_cuda.so, libcudart)
    at import, so the probes attach to them as on a GPU host, and the daemon reads the same large files."""
    import torch

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 128), torch.randn(32, 128)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    return step


def jax_step() -> Callable[[], None]:
    import jax
    import jax.numpy as jnp

    f = jax.jit(lambda x: jnp.tanh(x @ x.T) * 0.5)
    x = jnp.ones((256, 256), dtype=jnp.float32)

    def step() -> None:
        f(x).block_until_ready()

    return step


def main() -> int:
    kind = sys.argv[1]
    period = float(sys.argv[sys.argv.index("--period") + 1]) if "--period" in sys.argv else 0.002
    steps = {"torch": torch_step, "torch_cpu": torch_cpu_step, "jax": jax_step}
    step = cudart_step(sys.argv[2]) if kind == "cudart" else steps[kind]()
    for _ in range(3):  # first calls initialize the runtime (and compile kernels): not part of the steady loop
        step()
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    print(f"ready {os.getpid()}", flush=True)
    while not closed.is_set():
        step()
        time.sleep(period)  # the call rate, not synchronization: a steady stream of probed calls
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
