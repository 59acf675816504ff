"""What names in a profile say: library or user code, compile-time work, framework operators, and the
families of GPU kernels the rules care about (elementwise, GEMM precision, collectives)."""

from __future__ import annotations

import re
from functools import lru_cache

from deepctx.host.frames import is_library_file
from deepctx.host.torch_compile import is_wrapper_file

# Top-level packages whose frames are library code even when run from a source checkout.
_LIBRARY_MODULES = frozenset({
    "torch", "torchvision", "torchaudio", "triton", "jax", "jaxlib", "flax", "optax", "numpy", "transformers",
    "accelerate", "deepspeed", "apex", "lightning", "pytorch_lightning", "importlib", "runpy", "threading",
})


def is_library_frame(file: str | None, module: str | None) -> bool:
    """True for frames of installed packages and the interpreter's own library: the user cannot edit
    them, so findings point at the innermost frame that is not one."""
    if not file:
        return True
    if is_library_file(file) or is_wrapper_file(file):  # torch.compile's generated code: not the user's
        return True
    return bool(module) and module.split(".", 1)[0] in _LIBRARY_MODULES


# Frames of one-time work: tracing, lowering, compilation and autotuning (which runs candidate kernels on
# purpose). Python frames by their function's name, in library code only; native frames by symbol.
_COMPILE_NATIVE = re.compile(r"xla::Autotuner|xla::ConfigRunner|Autotun\w*::|RedzoneAllocator|xla::gpu::GpuCompiler"
                             r"|xla::Compile|PjRtStreamExecutorClient::Compile|CodegenOrchestrator")
_COMPILE_PYTHON = re.compile(r"(^|_)(compile|compiler|lower|lowering|trace_to_jaxpr\w*|bench|benchmark\w*|"
                             r"do_bench|autotune\w*|precompile|codegen)(_|$)")
_COMPILE_FILES = re.compile(r"/triton/compiler/|/torch/_inductor/(codecache|async_compile|compile_fx)\.py|"
                            r"/jax/_src/compiler\.py")
# Steady-state frames whose names say "compile": Dynamo's wrapper of every call of a torch.compile'd function
# (`_TorchDynamoContext.__call__.<locals>.compile_wrapper`, eval_frame.py), under which the compiled code runs
# at every step (the compile itself is below it, in convert_frame.py's frames). The H200's recordings of
# examples/inefficiencies had every kernel of compiled code counted as compile-time work before this.
_RUNTIME_FRAMES = re.compile(r"/torch/_dynamo/eval_frame\.py$")


# Frames of a compiled graph's call at every step, above the generated code: the compiled graph object and AOT
# autograd's runtime wrappers (the fixed cost of calling a graph); Inductor's generated wrapper itself
# (is_wrapper_file) launches the graph's kernels. Dynamo's eval_frame.py is not among them: its wrapper runs the
# whole compiled function, the Python between its graphs included.
_GRAPH_FILES = re.compile(r"/torch/_inductor/output_code\.py$|/torch/_functorch/_aot_autograd/runtime_wrappers\.py$|"
                          r"/torch/_functorch/aot_autograd\.py$")


def is_graph_call_frame(file: str | None) -> bool:
    return bool(file and _GRAPH_FILES.search(file))


@lru_cache(maxsize=65536)
def is_compile_frame(kind: str, name: str, file: str | None = None, library: bool = True) -> bool:
    if kind == "python":
        if not library:
            return False
        if file and _RUNTIME_FRAMES.search(file):
            return False
        return bool(_COMPILE_PYTHON.search(name.rsplit(".", 1)[-1])) or bool(file and _COMPILE_FILES.search(file))
    return kind == "native" and bool(_COMPILE_NATIVE.search(name))


_DATA_LOADER_FILE = re.compile(r"/torch/utils/data/")


def is_data_loader_frame(file: str | None) -> bool:
    return bool(file) and bool(_DATA_LOADER_FILE.search(file or ""))


# PyTorch's operator entry points in native frames: wrapper_CUDA_mul_Tensor, mul_kernel_cuda, ...
_WRAPPER = re.compile(r"wrapper_(?:CUDA|HIP|CompositeExplicitAutograd)_(?:_)?([a-z0-9]+(?:_[a-z0-9]+)*?)"
                      r"(?:_(?:Tensor|Scalar|out|functional|self|default|int|dim|dim_IntList|IntList))*\(")
_KERNEL_CUDA = re.compile(r"at::native::(?:\w+::)*(\w+?)_kernel_cuda\b")
_FUNCTOR = re.compile(r"([A-Z][a-z]+)Functor")
_GENERIC_FUNCTORS = frozenset({"Unary", "Binary", "Func", "Op", "Math", "Self"})


@lru_cache(maxsize=65536)
def operator_of(native_name: str) -> str | None:
    """The framework operator a native frame implements, e.g. 'mul' for wrapper_CUDA_mul_Tensor(...)."""
    m = _WRAPPER.search(native_name) or _KERNEL_CUDA.search(native_name)
    return m.group(1) if m else None


def operator_from_kernel(kernel: str) -> str | None:
    """The operation a PyTorch elementwise kernel's functor names (MulFunctor -> 'mul'), mangled or not."""
    for m in _FUNCTOR.finditer(kernel):
        if m.group(1) not in _GENERIC_FUNCTORS:
            return m.group(1).lower()
    return None


_MANGLED_PART = re.compile(r"(\d+)")


def short_kernel_name(name: str, limit: int = 80) -> str:
    """A kernel name people can read: no return type, template arguments or parameters; mangled names
    (possibly cut short by the probe) as their qualified name."""
    if name.startswith("_Z"):
        parts = _demangle_prefix(name)
        if parts:
            return "::".join(parts)[:limit]
        return name[:limit]
    text = name.removeprefix("void ")
    depth = 0
    out = []
    for ch in text:
        if ch in "<(":
            if depth == 0 and ch == "(":
                break
            depth += 1
            if depth == 1:
                out.append("<…>")
            continue
        if ch in ">)":
            depth = max(0, depth - 1)
            continue
        if depth == 0:
            out.append(ch)
    short = "".join(out).strip()
    return (short or name)[:limit]


def _demangle_prefix(name: str) -> list[str]:
    """The nested name of an Itanium-mangled symbol (_ZN2at6native4funcE...) as its parts."""
    i = 2
    if name[i:i + 1] == "N":
        i += 1
    parts: list[str] = []
    while i < len(name):
        m = _MANGLED_PART.match(name, i)
        if not m:
            break
        n = int(m.group(1))
        start = m.end()
        if n <= 0 or start + n > len(name):
            break
        parts.append(name[start:start + n])
        i = start + n
        if name[i:i + 1] != "" and not name[i].isdigit():
            break
    return parts


# Kernels whose work per thread is bounded (one or a few elements each), so a small grid means little
# work: PyTorch's elementwise and reduction kernels, XLA's loop fusions, Triton pointwise kernels.
_BOUNDED_WORK = re.compile(r"elementwise_kernel|reduce_kernel|index_elementwise|distribution_elementwise|"
                           r"^loop_\w*fusion|^input_\w*fusion|^triton_poi_|fill_kernel|CatArrayBatchedCopy|"
                           r"copy_kernel|DelayKernel|RedzoneAllocatorKernel|RepeatBufferKernel|xla_fp_comparison")
_ELEMENTWISE = re.compile(r"elementwise_kernel|^loop_\w*fusion|^triton_poi_")


def is_bounded_work_kernel(name: str) -> bool:
    return bool(_BOUNDED_WORK.search(name))


def is_elementwise_kernel(name: str) -> bool:
    return bool(_ELEMENTWISE.search(name)) and "distribution" not in name


# GEMM kernels by the precision their name says they compute in.
_GEMM = re.compile(r"gemm|gemv|xmma|cutlass|matmul|_mma_|hgemm|sgemm|dgemm", re.IGNORECASE)
_TENSOR_CORE = re.compile(r"tf32|bf16|f16|fp16|half|s1688|s16816|h1688|h16816|h884|i8816|hmma|imma|gmma|wgmma|"
                          r"tensorop|fp8|e4m3|e5m2|_16x8x|bf16", re.IGNORECASE)
_FP32_CORE = re.compile(r"sgemm|gemmSN|gemmk1_kernel<float|gemv2[NT]_kernel<int, int, float|"
                        r"xmma_gemm_f32f32_f32f32_f32|_ffma_|simt_sgemm|gemv\w*<float", re.IGNORECASE)


def gemm_precision(name: str) -> str | None:
    """'fp32' for a single-precision GEMM on the CUDA cores, 'tensor-core' for one on tensor cores (TF32,
    BF16, FP16, FP8, INT8), None for kernels that are not GEMMs or whose name does not say."""
    if not _GEMM.search(name):
        return None
    if _TENSOR_CORE.search(name):
        return "tensor-core"
    if _FP32_CORE.search(name):
        return "fp32"
    return None


_COLLECTIVE_KERNEL = re.compile(r"nccl|rccl|oneRankReduce|cross_device_reduce|all_reduce|allreduce|all_gather|"
                                r"reduce_scatter", re.IGNORECASE)


def is_collective_kernel(name: str) -> bool:
    return bool(_COLLECTIVE_KERNEL.search(name))


# torch.optim's update implementations: _single_tensor_adam (a loop over the parameters, several kernels each),
# _multi_tensor_adam (foreach: a few kernels per chunk of tensors), _fused_adam (one kernel per group)
_OPTIMIZER_IMPL = re.compile(r"^_(single_tensor|multi_tensor|fused)_(\w+)$")
_OPTIMIZER_FILE = re.compile(r"/torch/optim/\w+\.py$")
FUSED_OPTIMIZERS = frozenset({"adam", "adamw", "sgd", "adagrad"})  # torch.optim classes that take fused=True


def optimizer_impl(file: str | None, function: str) -> tuple[str, str] | None:
    """(optimizer, path) of a torch.optim update frame: ('adam', 'single_tensor'), ('sgd', 'fused') ..."""
    if not file or not _OPTIMIZER_FILE.search(file):
        return None
    m = _OPTIMIZER_IMPL.match(function.rsplit(".", 1)[-1])
    return (m.group(2), m.group(1)) if m else None
