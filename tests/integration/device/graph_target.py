"""CUDA graphs through the mock CUDA runtime (tests/mocks): a stream capture of launches made at two lines of
a model-like function, the graph instantiated, then replayed N_REPLAY times from one line.

    python graph_target.py MOCK_LIB_DIR

Prints "ready <pid>", waits for "go", captures, instantiates and replays, prints "cupti <subscribed>
<callbacks>" and "done", then waits for stdin to close. The mock's kernels last MATMUL_NS and RELU_NS.
"""

from __future__ import annotations

import ctypes
import os
import sys

N_REPLAY = 6
MATMUL_NS, RELU_NS = 1500, 700
MATMUL_NAME, RELU_NAME = b"_Z11mock_matmulPfi", b"_Z9mock_reluPf"


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def layer(rt: ctypes.CDLL, matmul: int, relu: int) -> None:
    """What a model's forward launches: captured once, replayed from the graph."""
    rt.cudaLaunchKernel(ctypes.c_void_p(matmul), Dim3(4, 1, 1), Dim3(256, 1, 1), None, ctypes.c_size_t(0), None)  # LINE_MATMUL
    rt.cudaLaunchKernel(ctypes.c_void_p(relu), Dim3(8, 1, 1), Dim3(128, 1, 1), None, ctypes.c_size_t(0), None)  # LINE_RELU


def capture(rt: ctypes.CDLL, matmul: int, relu: int) -> ctypes.c_void_p:
    graph, exe = ctypes.c_void_p(), ctypes.c_void_p()
    assert rt.cudaStreamBeginCapture(None, 0) == 0
    layer(rt, matmul, relu)  # LINE_CAPTURE
    assert rt.cudaStreamEndCapture(None, ctypes.byref(graph)) == 0
    assert rt.cudaGraphInstantiate(ctypes.byref(exe), graph, ctypes.c_ulonglong(0)) == 0
    return exe


def replay(rt: ctypes.CDLL, exe: ctypes.c_void_p) -> None:
    for _ in range(N_REPLAY):
        assert rt.cudaGraphLaunch(exe, None) == 0  # LINE_REPLAY


def main() -> None:
    lib = sys.argv[1]
    cu = ctypes.CDLL(os.path.join(lib, "libcuda.so.1"))
    rt = ctypes.CDLL(os.path.join(lib, "libcudart.so.13"))
    kernels = ctypes.CDLL(os.path.join(lib, "libmockkernels.so"))
    matmul = ctypes.cast(kernels._Z11mock_matmulPfi, ctypes.c_void_p).value or 0
    relu_handle = ctypes.create_string_buffer(64)  # a bare handle, registered with its name
    relu = ctypes.addressof(relu_handle)
    cu.mockRegisterKernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
    cu.mockRegisterKernel(matmul, MATMUL_NAME, MATMUL_NS)
    cu.mockRegisterKernel(relu, RELU_NAME, RELU_NS)
    cu.cuInit(0)  # the CUDA context (and, with CUDA_INJECTION64_PATH, the agent) comes up here
    cupti = ctypes.CDLL(os.path.join(lib, "libcupti.so.13"))
    cupti.mockcupti_callbacks.restype = ctypes.c_uint64
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    replay(rt, capture(rt, matmul, relu))  # LINE_MAIN
    print(f"cupti {cupti.mockcupti_subscribed()} {cupti.mockcupti_callbacks()}", flush=True)
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()  # LINE_MODULE
