"""The demo's workload on a machine without a GPU: a small "training loop" that drives the mock CUDA runtime
and driver of tests/mocks (built by install.sh) through ctypes, as PyTorch drives the real ones. The mock
device runs each kernel for a fixed, made-up time and reports it through the mock CUPTI, so deepctx's agent,
probes and analyzer see what they would see on a GPU: only the device is simulated.

    python examples/simulated_train.py MOCK_LIB_DIR [seconds]

Its pattern: add_bias() launches one tiny kernel per row (one launch per loop iteration, each ~1 µs of GPU
work for several µs of host work), the analyzer's launch-bound-loop; matmul() launches one longer kernel; read_loss() copies the loss to
the host every step. It runs for a while (2 s by default): the daemon reads the code objects of the stacks it
sees while the process lives, so the Python lines of a process that exits at once could stay [unknown].
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

ROWS = 64
TINY_NS, MATMUL_NS = 300, 5_000  # made up: the simulated device is idle most of each step


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def launch(rt: ctypes.CDLL, stub: int, blocks: int) -> None:
    rt.cudaLaunchKernel(ctypes.c_void_p(stub), Dim3(blocks, 1, 1), Dim3(128, 1, 1), None, ctypes.c_size_t(0), None)


def matmul(rt: ctypes.CDLL, stub: int) -> None:
    launch(rt, stub, 1024)


def add_bias(cu: ctypes.CDLL, handle: int) -> None:
    for _ in range(ROWS):  # one launch per row: the loop a tensor operation would replace
        cu.cuLaunchKernel(ctypes.c_void_p(handle), 1, 1, 1, 128, 1, 1, 0, None, None, None)


def read_loss(rt: ctypes.CDLL, host: ctypes.Array) -> None:
    rt.cudaMemcpy(host, None, ctypes.c_size_t(len(host)), 2)  # device to host: waits for the GPU


def train(cu: ctypes.CDLL, rt: ctypes.CDLL, matmul_stub: int, add_handle: int, seconds: float) -> None:
    loss = ctypes.create_string_buffer(4)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        matmul(rt, matmul_stub)
        add_bias(cu, add_handle)
        read_loss(rt, loss)
    rt.cudaDeviceSynchronize()


def main() -> None:
    lib = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    cu = ctypes.CDLL(os.path.join(lib, "libcuda.so.1"))
    rt = ctypes.CDLL(os.path.join(lib, "libcudart.so.13"))
    kernels = ctypes.CDLL(os.path.join(lib, "libmockkernels.so"))  # host stubs named like kernels
    matmul_stub = ctypes.cast(kernels._Z11mock_matmulPfi, ctypes.c_void_p).value or 0
    add_kernel = ctypes.create_string_buffer(64)  # a module's kernel handle (cuLaunchKernel): CUPTI names it
    add_handle = ctypes.addressof(add_kernel)
    cu.mockRegisterKernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
    cu.mockRegisterKernel(matmul_stub, b"_Z11mock_matmulPfi", MATMUL_NS)
    cu.mockRegisterKernel(add_handle, b"_Z8add_biasPfPKfi", TINY_NS)
    cu.cuInit(0)  # the simulated device comes up here, and with it deepctx's CUPTI agent
    train(cu, rt, matmul_stub, add_handle, seconds)


if __name__ == "__main__":
    main()
