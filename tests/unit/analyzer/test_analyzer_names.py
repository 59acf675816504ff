"""Kernel, operator and frame names: what the rules read from them, on names recorded on the H200."""

from __future__ import annotations

import pytest

from deepctx.profiles.analyzer import apis
from deepctx.profiles.analyzer.names import (
    gemm_precision,
    is_bounded_work_kernel,
    is_compile_frame,
    is_elementwise_kernel,
    is_library_frame,
    operator_from_kernel,
    operator_of,
    short_kernel_name,
)

MANGLED_MUL = ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctorIfffNS0_15binary_internal10MulFunctor"
               "IfEEEESt5arrayIPcLm2EE")


@pytest.mark.parametrize(("name", "precision"), [
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel"
     "__5x_cublas", "fp32"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize64x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "tensor-core"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>(cutlass_80_tensorop_s1688gemm_128x128_"
     "16x4_tn_align4::Params)", "tensor-core"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)", "fp32"),
    ("ampere_sgemm_128x64_nn", "fp32"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1", "tensor-core"),
    ("gemm_fusion_dot_1", None),  # XLA's Triton GEMM: the name does not say
    ("void at::native::vectorized_elementwise_kernel<4, ...>", None),
])
def test_gemm_precision(name: str, precision: str | None) -> None:
    assert gemm_precision(name) == precision


def test_short_kernel_names() -> None:
    assert short_kernel_name(MANGLED_MUL) == "at::native::vectorized_elementwise_kernel"
    assert short_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::BUnaryFunctor<float> >"
                             "(int, std::array<char*, 2ul>)") == "at::native::vectorized_elementwise_kernel<…>"
    assert short_kernel_name("stream_executor::gpu::RepeatBufferKernelImpl(char*, long, long)") == \
        "stream_executor::gpu::RepeatBufferKernelImpl"
    assert short_kernel_name("deepctx_add_kernel") == "deepctx_add_kernel"


def test_operators_from_native_frames_and_kernel_names() -> None:
    assert operator_of("at::(anonymous namespace)::wrapper_CUDA_mul_Tensor(at::Tensor const&, at::Tensor const&)") == "mul"
    assert operator_of("at::(anonymous namespace)::wrapper_CUDA_div_Tensor(at::Tensor const&, at::Tensor const&)") == "div"
    assert operator_of("at::native::binary_internal::div_true_kernel_cuda(at::TensorIteratorBase&)") == "div_true"
    assert operator_of("at::native::sum(at::Tensor const&, std::optional<c10::ScalarType>)") is None
    assert operator_from_kernel(MANGLED_MUL) == "mul"


def test_kernel_families() -> None:
    assert is_elementwise_kernel(MANGLED_MUL) and is_bounded_work_kernel(MANGLED_MUL)
    assert is_bounded_work_kernel("_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_14func_wrapper_tIf")
    assert is_elementwise_kernel("loop_add_fusion") and not is_elementwise_kernel("gemm_fusion_dot_1")
    assert not is_bounded_work_kernel("deepctx_add_kernel")
    assert not is_elementwise_kernel("_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_0c5b6e8543distribution"
                                     "_elementwise_grid_stride_kernelIfLi4E")


def test_library_and_compile_frames() -> None:
    assert is_library_frame("/opt/torch/.venv/lib/python3.12/site-packages/torch/cuda/__init__.py", "torch.cuda")
    assert is_library_frame("/usr/lib/python3.12/threading.py", "threading")
    assert is_library_frame("<frozen importlib._bootstrap>", "importlib._bootstrap")
    assert is_library_frame(None, None)
    assert not is_library_frame("/work/main/tests/gpu/targets/torch_ops.py", "torch_ops")
    assert is_compile_frame("python", "backend_compile_and_load")
    assert is_compile_frame("python", "compile", "/x/site-packages/triton/compiler/compiler.py")
    assert not is_compile_frame("python", "compile", "/srv/app/train.py", library=False)
    assert not is_compile_frame("python", "CachingAutotuner.run", "/x/site-packages/torch/_inductor/runtime/x.py")
    assert is_compile_frame("native", "xla::Autotuner::GetTunedConfig(xla::HloInstruction const*, int) const")


def test_api_classes() -> None:
    assert [apis.api_class(n) for n in ("cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync", "cuMemFree_v2",
                                        "cuMemHostAlloc", "cudaStreamSynchronize", "ncclAllReduce", "cuStreamWaitEvent")] \
        == ["launch", "launch", "memcpy", "free", "alloc", "sync", "collective", "other"]
    assert apis.is_synchronous_copy("cudaMemcpy") and apis.is_synchronous_copy("cuMemcpyHtoD_v2")
    assert not apis.is_synchronous_copy("cudaMemcpyAsync")
    assert apis.is_api_entry("cuCtxSynchronize_v2") and not apis.is_api_entry("cuLibraryLoadData")
