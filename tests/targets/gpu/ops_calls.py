"""PyTorch-like operators through a miniature of ATen (tests/targets/ops/torch_cpu.cc and torch_cuda.cc).

    python ops_calls.py LIBTORCH_CPU LIBCUDART [--mock MOCK_LIB_DIR]

Prints "ready <pid>", waits for a line, runs ROUNDS steps (matmul, whose mm launches GEMMS kernels; a
sum.dim_IntList launching REDUCES; addmm launching GEMMS; mul.Tensor launching MULS from its CUDA kernel's
wrapper, its entry points without frame pointers; conv2d launching CONVS from a cuDNN-like function, its
binding the one operator frame the walk finds; bmm launching BMMS from code that uses rbp for data, where the
frame-pointer walk is lost; relu launching RELUS from clamp_min's stub kernel, the walk lost above it), prints
"done".
--mock: LIBCUDART is the mock runtime of tests/mocks (whose CUPTI the agent drives): the kernels are registered
with the mock driver under their names, and CUDA is initialized before "ready" (device activity needs a context).
"""

from __future__ import annotations

import ctypes
import os
import sys

ROUNDS, GEMMS, REDUCES, MULS, CONVS, BMMS, RELUS = 5, 3, 2, 4, 2, 3, 2


def step(lib: ctypes.CDLL) -> None:
    lib.ops_matmul(GEMMS)  # LINE_MATMUL
    lib.ops_sum(REDUCES)  # LINE_SUM
    lib.ops_addmm(GEMMS)  # LINE_ADDMM
    lib.ops_mul(MULS)  # LINE_MUL
    lib.ops_conv2d(CONVS)  # LINE_CONV
    lib.ops_bmm(BMMS)  # LINE_BMM
    lib.ops_relu(RELUS)  # LINE_RELU


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    for fn in (lib.ops_matmul, lib.ops_sum, lib.ops_addmm, lib.ops_mul, lib.ops_conv2d, lib.ops_bmm, lib.ops_relu):
        fn.argtypes, fn.restype = [ctypes.c_long], ctypes.c_long
    assert lib.ops_init(sys.argv[2].encode()) == 0
    if "--mock" in sys.argv:
        cu = ctypes.CDLL(os.path.join(sys.argv[sys.argv.index("--mock") + 1], "libcuda.so.1"))
        cu.mockRegisterKernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
        cuda_side = ctypes.CDLL(os.path.join(os.path.dirname(sys.argv[1]), "libtorch_cuda.so"))
        for name, where in (("gemm_kernel", lib), ("reduce_kernel", lib), ("conv_kernel", lib),
                            ("mul_kernel", cuda_side), ("relu_kernel", cuda_side)):
            cu.mockRegisterKernel(ctypes.cast(getattr(where, name), ctypes.c_void_p), name.encode(), 1000)
        assert cu.cuInit(0) == 0
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    for _ in range(ROUNDS):
        step(lib)
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
