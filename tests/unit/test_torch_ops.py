"""Operator names from libtorch's schema strings (host/torch_ops.py) and operator frames on native stacks
(daemon/symbolize/native.py: with_operators)."""

from __future__ import annotations

from pathlib import Path

from deepctx.daemon.symbolize.native import with_operators
from deepctx.host.file_cache import FileCache
from deepctx.host.frames import Frame
from deepctx.host.torch_ops import (
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


def test_the_library_table_and_its_fallback() -> None:
    assert {k: library_names(str(LIBOPS))[k] for k in ("mm", "matmul", "sum_dim_IntList", "addmm")} == {
        "mm": "mm", "matmul": "matmul", "sum_dim_IntList": "sum.dim_IntList", "addmm": "addmm"}
    ops = OperatorNames(FileCache(max_entries=4))
    assert ops.name("sum_dim_IntList", str(LIBOPS)) == "aten::sum.dim_IntList"
    assert ops.name("unknown_Thing", str(LIBOPS)) == "aten::unknown_Thing"  # no schema: the struct as is
    assert ops.name("mm", "/nonexistent/libtorch_cpu.so") == "aten::mm" and ops.failures == 1
    assert ops.name("mm", None) == "aten::mm"
    assert ops.name("mul_Tensor", str(LIBOPS), wrapper=True) == "aten::mul.Tensor"


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
    assert operator_frame("at::_ops::mul_Tensor::call(at::Tensor const&, at::Tensor const&)") == ("mul_Tensor", False)
    assert operator_frame("at::_ops::mm::redispatch(c10::DispatchKeySet, at::Tensor const&)") == ("mm", False)
    assert operator_frame("at::(anonymous namespace)::wrapper_CUDA_mul_Tensor(at::Tensor const&, at::Tensor const&)") \
        == ("mul_Tensor", True)
    assert operator_frame("at::(anonymous namespace)::(anonymous namespace)::wrapper_SparseCPU_out_mm_out(at::Tensor "
                          "const&, at::Tensor const&, at::Tensor&)") == ("out_mm_out", True)
    # a wrapper named in a functor's template arguments is not the frame's own function
    assert operator_frame("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::"
                          "CompileTimeFunctionPointer<at::Tensor (at::Tensor const&), &at::(anonymous namespace)::"
                          "wrapper_CUDA_mm>, at::Tensor>>::call(c10::OperatorKernel*)") is None
    assert operator_frame("at::native::mm(at::Tensor const&)") is None
    assert operator_frame("at::_ops::mm::name") is None


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
