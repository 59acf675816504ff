"""Operator names from libtorch's schema strings (host/torch_ops.py) and operator frames on native stacks
(daemon/symbolize/native.py: with_operators)."""

from __future__ import annotations

from pathlib import Path

from deepctx.daemon.symbolize.native import with_operators
from deepctx.host.file_cache import FileCache
from deepctx.host.frames import Frame
from deepctx.host.torch_ops import (
    BINDING,
    ENTRY,
    STUB,
    WRAPPER,
    OperatorNames,
    library_names,
    operator_frame,
    read_schema_names,
    wrapper_keys,
)

LIBOPS = Path(__file__).resolve().parents[1] / "targets" / "bin" / "torch" / "libtorch_cpu.so"


def rodata(*schemas: str) -> bytes:
    return b"\0".join(s.encode() for s in ("junk", *schemas, "aten::not_a_schema", "")) + b"\0"


def test_struct_names_split_as_the_schemas_say() -> None:
    names = read_schema_names(rodata(
        "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False) -> Tensor",
        "sum_to_size(Tensor(a) self, SymInt[] size) -> Tensor(a)",
        "mul.Tensor(Tensor self, Tensor other) -> Tensor",
        "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
        "gather.out(Tensor self, int dim, Tensor index, *, Tensor(a!) out) -> Tensor(a!)",
        "gather_out(Tensor self) -> Tensor",  # another library's operator named like aten's overload
        "sparse_sampled_addmm(Tensor self, Tensor mat1, Tensor mat2) -> Tensor",  # addmm's, merged into its tail
        "mm(Tensor self, Tensor mat2) -> Tensor",
    ))
    assert names["sum_dim_IntList"] == "sum.dim_IntList"
    assert names["sum_to_size"] == "sum_to_size"
    assert names["mul_Tensor"] == "mul.Tensor"
    assert names["add__Tensor"] == "add_.Tensor"
    assert names["gather_out"] == "gather.out"  # an overload's split first
    assert names["addmm"] == "addmm" and names["sparse_sampled_addmm"] == "sparse_sampled_addmm"
    assert names["mm"] == "mm"
    assert "not_a_schema" not in names


def test_the_library_table_and_its_fallback(native_targets: Path) -> None:
    """LIBOPS is built by make (native_targets): on a fresh clone this test once ran before any build."""
    assert {k: library_names(str(LIBOPS))[k] for k in ("mm", "matmul", "sum_dim_IntList", "addmm")} == {
        "mm": "mm", "matmul": "matmul", "sum_dim_IntList": "sum.dim_IntList", "addmm": "addmm"}
    ops = OperatorNames(FileCache(max_entries=4))
    assert ops.name("sum_dim_IntList", str(LIBOPS)) == "aten::sum.dim_IntList"
    assert ops.name("unknown_Thing", str(LIBOPS)) == "aten::unknown_Thing"  # no schema: the struct as is
    assert ops.name("mm", "/nonexistent/libtorch_cpu.so") == "aten::mm" and ops.failures == 1
    assert ops.name("mm", None) == "aten::mm"
    assert ops.name("mul_Tensor", str(LIBOPS), WRAPPER) == "aten::mul.Tensor"
    assert ops.name("conv2d", str(LIBOPS), BINDING) == "aten::conv2d"
    assert ops.name("numpy", str(LIBOPS), BINDING) is None


def test_wrapper_names_as_torchgen_makes_them() -> None:
    names = read_schema_names(rodata("mm(Tensor self, Tensor mat2) -> Tensor",
                                     "mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)",
                                     "_scaled_mm(Tensor self, Tensor mat2) -> Tensor",
                                     "mul.Tensor(Tensor self, Tensor other) -> Tensor"))

    def name(rest: str) -> str | None:
        return next((names[k] for k in wrapper_keys(rest) if k in names), None)

    assert name("mul_Tensor") == "mul.Tensor"  # structured: wrapper_CUDA_mul_Tensor
    assert name("mm") == "mm"  # structured, default overload: wrapper_CUDA_mm
    assert name("_mm") == "mm"  # unstructured, default overload: wrapper_SparseCPU__mm
    assert name("out_mm_out") == "mm.out"  # unstructured out= overload: wrapper_SparseCPU_out_mm_out
    assert name("__scaled_mm") == "_scaled_mm"  # an operator named _x: wrapper_CPU___scaled_mm


def test_operator_frames_by_their_demangled_names() -> None:
    assert operator_frame("at::_ops::mul_Tensor::call(at::Tensor const&, at::Tensor const&)") == ("mul_Tensor", ENTRY)
    assert operator_frame("at::_ops::mm::redispatch(c10::DispatchKeySet, at::Tensor const&)") == ("mm", ENTRY)
    assert operator_frame("at::(anonymous namespace)::wrapper_CUDA_mul_Tensor(at::Tensor const&, at::Tensor const&)") \
        == ("mul_Tensor", WRAPPER)
    assert operator_frame("at::(anonymous namespace)::(anonymous namespace)::wrapper_SparseCPU_out_mm_out(at::Tensor "
                          "const&, at::Tensor const&, at::Tensor&)") == ("out_mm_out", WRAPPER)
    # a wrapper named in a functor's template arguments is not the frame's own function
    assert operator_frame("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::"
                          "CompileTimeFunctionPointer<at::Tensor (at::Tensor const&), &at::(anonymous namespace)::"
                          "wrapper_CUDA_mm>, at::Tensor>>::call(c10::OperatorKernel*)") is None
    assert operator_frame("at::native::mm(at::Tensor const&)") is None
    assert operator_frame("at::_ops::mm::name") is None
    # the Python binding of torch.conv2d (libtorch_python.so): the operator without its overload
    assert operator_frame("torch::autograd::THPVariable_conv2d(_object*, _object*, _object*)") == ("conv2d", BINDING)
    assert operator_frame("torch::autograd::THPVariable_add_(_object*, _object*, _object*)") == ("add_", BINDING)
    assert operator_frame("torch::autograd::(anonymous namespace)::helper(_object*)") is None


def test_a_binding_names_an_operator_only_where_the_schemas_have_it(tmp_path: Path) -> None:
    class Files:  # the daemon's file cache, as OperatorNames uses it
        def identify(self, path: str) -> str:
            return path

        def get(self, ident: str, kind: str, load: object, nbytes: object) -> dict[str, str]:
            return {"conv2d": "conv2d", "mul_Tensor": "mul.Tensor", "add__Tensor": "add_.Tensor"}

    names = OperatorNames(Files())  # type: ignore[arg-type]
    assert names.name("conv2d", "libtorch_cpu.so", BINDING) == "aten::conv2d"
    assert names.name("mul", "libtorch_cpu.so", BINDING) == "aten::mul"  # its overload is the binding's choice
    assert names.name("add_", "libtorch_cpu.so", BINDING) == "aten::add_"
    assert names.name("numpy", "libtorch_cpu.so", BINDING) is None  # a method that is no operator
    assert names.name("conv2d", None, BINDING) is None  # no schemas: nothing to tell an operator by


def test_one_operator_frame_above_each_operators_entry() -> None:
    def nat(name: str) -> Frame:
        return Frame("native", name, module="libtorch_cpu.so")

    matmul, mm_call, mm_redo = nat("at::_ops::matmul::call()"), nat("at::_ops::mm::call()"), nat("at::_ops::mm::redispatch()")
    op = {matmul: Frame("op", "aten::matmul"), mm_call: Frame("op", "aten::mm"), mm_redo: Frame("op", "aten::mm")}
    line = Frame("python", "step", "/srv/a.py", 3)
    frames = [line, nat("THPVariable_matmul"), matmul, nat("at::native::matmul"), mm_call, nat("VariableType::mm"),
              mm_redo, nat("mm_cuda"), Frame("api", "cudaLaunchKernel")]
    got = [f.name for f in with_operators(frames, op)]
    assert got == ["step", "THPVariable_matmul", "aten::matmul", "at::_ops::matmul::call()", "at::native::matmul",
                   "aten::mm", "at::_ops::mm::call()", "VariableType::mm", "at::_ops::mm::redispatch()", "mm_cuda",
                   "cudaLaunchKernel"]
    # the same operator again after a Python frame (a callback) is a new call: it gets its own node
    again = with_operators([mm_call, Frame("python", "hook", "/srv/a.py", 9), mm_call], op)
    assert [f.name for f in again] == ["aten::mm", "at::_ops::mm::call()", "hook", "aten::mm", "at::_ops::mm::call()"]


def test_an_operator_named_by_its_binding_gives_way_to_a_nearer_frame_of_the_same_operator() -> None:
    def nat(name: str) -> Frame:
        return Frame("native", name, module="libtorch_cpu.so")

    binding_mul, wrapper = nat("torch::autograd::THPVariable_mul()"), nat("at::wrapper_CUDA_mul_Tensor()")
    binding_conv, cudnn = nat("torch::autograd::THPVariable_conv2d()"), nat("cudnn::conv_launch()")
    by_binding = {binding_mul: Frame("op", "aten::mul", module="libtorch_python.so"),
                  binding_conv: Frame("op", "aten::conv2d", module="libtorch_python.so")}
    op = {**by_binding, wrapper: Frame("op", "aten::mul.Tensor")}
    line = Frame("python", "step", "/srv/a.py", 3)
    launch = Frame("api", "cudaLaunchKernel")
    # the wrapper names the binding's operator with its overload: one operator node, where the binding's stood
    got = with_operators([line, binding_mul, nat("at::_ops::mul_Tensor::call()"), wrapper, launch], op,
                         set(by_binding.values()))
    assert [f.name for f in got] == ["step", "aten::mul.Tensor", "torch::autograd::THPVariable_mul()",
                                     "at::_ops::mul_Tensor::call()", "at::wrapper_CUDA_mul_Tensor()", "cudaLaunchKernel"]
    # a convolution whose frames below the binding were lost: the binding's operator stays
    got = with_operators([line, binding_conv, cudnn, launch], op, set(by_binding.values()))
    assert [f.name for f in got] == ["step", "aten::conv2d", "torch::autograd::THPVariable_conv2d()",
                                     "cudnn::conv_launch()", "cudaLaunchKernel"]
    # the kernel registered for an operator, inside its entry: the same call (the entry's node, from another
    # library than the wrapper's)
    cudnn_call, cudnn_wrapper = nat("at::_ops::cudnn_convolution::call()"), nat("at::wrapper_CUDA__cudnn_convolution()")
    got = with_operators([cudnn_call, nat("at::native::cudnn_convolution()"), cudnn_wrapper, launch],
                         {cudnn_call: Frame("op", "aten::cudnn_convolution", module="libtorch_cpu.so"),
                          cudnn_wrapper: Frame("op", "aten::cudnn_convolution", module="libtorch_cuda.so")})
    assert [f.name for f in got if f.kind == "op"] == ["aten::cudnn_convolution"]
    # an operator named by its entry is not provisional: another of the same name inside it is its own call
    mm = nat("at::_ops::mm::call()")
    got = with_operators([mm, nat("x"), nat("at::_ops::mm_out::call()")],
                         {mm: Frame("op", "aten::mm"), nat("at::_ops::mm_out::call()"): Frame("op", "aten::mm.out")})
    assert [f.name for f in got] == ["aten::mm", "at::_ops::mm::call()", "x", "aten::mm.out", "at::_ops::mm_out::call()"]


def test_a_stub_kernel_names_the_operator_its_name_begins_with() -> None:
    """DispatchStub kernels (clamp_min_scalar_kernel_impl, mul_kernel_cuda): the longest head of the name that the
    schemas hold; templates, launchers and names no schema holds name none."""
    assert operator_frame("at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, "
                          "c10::Scalar const&)") == ("clamp_min_scalar", STUB)
    assert operator_frame("at::native::mul_kernel_cuda(at::TensorIteratorBase&)") == ("mul", STUB)
    assert operator_frame("at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&)") is None
    assert operator_frame("void at::native::gpu_kernel_impl_nocast<float>(at::TensorIteratorBase&)") is None
    assert operator_frame("at::native::reduce_kernel<512, 1>(at::TensorIterator&)") is None

    class Files:
        def identify(self, path: str) -> str:
            return path

        def get(self, ident: str, kind: str, load: object, nbytes: object) -> dict[str, str]:
            return {"clamp_min": "clamp_min", "clamp": "clamp", "mul_Tensor": "mul.Tensor", "bitwise_and_Tensor":
                    "bitwise_and.Tensor"}

    names = OperatorNames(Files())  # type: ignore[arg-type]
    assert names.name("clamp_min_scalar", "libtorch_cpu.so", STUB) == "aten::clamp_min"  # not aten::clamp
    assert names.name("mul", "libtorch_cpu.so", STUB) == "aten::mul"
    assert names.name("bitwise_and", "libtorch_cpu.so", STUB) == "aten::bitwise_and"
    assert names.name("gpu", "libtorch_cpu.so", STUB) is None
    assert names.name("mul", None, STUB) is None


def test_a_stub_kernels_operator_stands_only_where_no_frame_of_it_is_outside() -> None:
    def nat(name: str) -> Frame:
        return Frame("native", name, module="libtorch_cuda.so")

    line, launch = Frame("python", "step", "/srv/a.py", 3), Frame("api", "cudaLaunchKernel")
    entry, stub = nat("at::_ops::mul_Tensor::call()"), nat("at::native::mul_kernel_cuda()")
    relu_entry, clamp_stub = nat("at::_ops::relu::call()"), nat("at::native::clamp_min_scalar_kernel_impl()")
    stub_ops = {stub: Frame("op", "aten::mul"), clamp_stub: Frame("op", "aten::clamp_min")}
    op = {**stub_ops, entry: Frame("op", "aten::mul.Tensor"), relu_entry: Frame("op", "aten::relu")}
    # inside its operator's entry: the same call, no second node
    got = with_operators([line, entry, stub, launch], op, set(stub_ops.values()))
    assert [f.name for f in got if f.kind == "op"] == ["aten::mul.Tensor"]
    # the walk lost above it: the stub's operator
    got = with_operators([line, clamp_stub, launch], op, set(stub_ops.values()))
    assert [f.name for f in got] == ["step", "aten::clamp_min", "at::native::clamp_min_scalar_kernel_impl()",
                                     "cudaLaunchKernel"]
    # inside another operator's entry (relu runs clamp_min): its own node below
    got = with_operators([line, relu_entry, clamp_stub, launch], op, set(stub_ops.values()))
    assert [f.name for f in got if f.kind == "op"] == ["aten::relu", "aten::clamp_min"]

