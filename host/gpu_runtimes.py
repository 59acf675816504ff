"""The GPU runtimes deepctx knows, defined once: the libraries that show a process uses one, and the
variables through which each runtime loads a tool agent at its start."""

from __future__ import annotations

import re

# The libraries the GPU API probes attach to, by kind (host/gpu_apis.py names each entry point's kind).
LIBRARIES = {
    "cudart": re.compile(r"^libcudart\.so"),
    "cuda": re.compile(r"^libcuda\.so"),
    "hip": re.compile(r"^libamdhip64\.so"),
    "nccl": re.compile(r"^libnccl\.so"),
    "rccl": re.compile(r"^librccl\.so"),
}
# A process with any of these loaded uses a GPU: the probed libraries, and ROCm's HSA runtime (HIP sits on it).
GPU_LIBRARY = re.compile("|".join([p.pattern for p in LIBRARIES.values()] + [r"^libhsa-runtime64\.so"]))

# The GEMM and convolution libraries: they launch their kernels themselves, called from framework code that
# often has no frame pointers (PyTorch's libtorch_cuda), so a launch they make whose frame-pointer walk is lost
# goes on with .eh_frame to reach its operator (probes/gpu_api.bpf.c, GPU_FP_CONTINUE).
CONTINUED_LIBRARY = re.compile(r"^lib(cublas|cublasLt|cudnn[a-z_]*|hipblas|hipblaslt|rocblas|MIOpen)\.so")

# Read by the CUDA driver at cuInit, and by rocprofiler-sdk at HIP's start (a colon-separated list).
CUDA_INJECTION_VAR = "CUDA_INJECTION64_PATH"
ROCM_INJECTION_VAR = "ROCP_TOOL_LIBRARIES"
INJECTION_VARS = (CUDA_INJECTION_VAR, ROCM_INJECTION_VAR)
