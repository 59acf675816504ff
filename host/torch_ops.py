"""PyTorch operators from native frames: `at::_ops::mul_Tensor::call(...)` is the operator `aten::mul.Tensor`.

Every ATen operator has a generated struct in libtorch_cpu (`at::_ops::<op>_<overload>`, or `<op>` for the
default overload) whose `call` enters the dispatcher and whose `redispatch` passes the call on from one
dispatch key to the next (autograd, then the CUDA kernel). The struct's name joins the operator's name and
its overload with an underscore, so it cannot be split by itself: `sum_dim_IntList` is `sum.dim_IntList`,
`sum_to_size` is the operator `sum_to_size`. The library's .rodata holds every operator's schema as a string
(`mul.Tensor(Tensor self, Tensor other) -> Tensor`); the names in those strings tell which split is real.
The linker merges a string into the tail of a longer one (`addmm(...)` into `sparse_sampled_addmm(...)` when
their arguments match), so every tail of a schema's name is a name the library holds too.

One table per library file, in the daemon's per-file cache (host/file_cache.py), read at the first operator
frame of that file (about 0.1 s for libtorch_cpu.so's 18 MB of .rodata)."""

from __future__ import annotations

import re
import sys

from deepctx.host.elf.reader import ElfFile
from deepctx.host.file_cache import FileCache

KIND = "torch_ops"  # entries of the per-file cache
NAMESPACE = "aten"
# the demangled name of an operator's entry (call) or of its hand-over between dispatch keys (redispatch)
OPERATOR_FRAME = re.compile(r"^at::_ops::(\w+)::(?:call|redispatch)\(")
# the kernel a dispatch key registered for an operator (at::(anonymous namespace)::wrapper_CUDA_mul_Tensor(...)):
# near the launch, so native unwinding reaches it where frame-pointer-less code between the Python line and
# the kernel lost the operator's entry. Structured kernels are named wrapper_<key>_<struct>, the others
# wrapper_<key>_<overload>_<name> (wrapper_SparseCPU__mm, wrapper_SparseCPU_out_mm_out). Only the function's
# own name counts, not one in its template arguments (wrap_kernel_functor_unboxed_<...&wrapper_CUDA_mm>).
WRAPPER_FRAME = re.compile(r"^(?:[\w:]*::|\(anonymous namespace\)::)*wrapper_[A-Z][A-Za-z0-9]*_(\w+)\(")
# the Python binding of a torch function or Tensor method (torch::autograd::THPVariable_conv2d, in
# libtorch_python.so): the outermost native frame of an operator's call, which a frame-pointer walk still reaches
# where it lost the frames below (cuDNN's and libtorch_cuda's, built without frame pointers: a convolution's
# path goes from the binding to the kernel's launch). It names the operator, not its overload (the binding picks
# that from the Python arguments at run time), and only a name the schemas hold (THPVariable_numpy names none).
BINDING_FRAME = re.compile(r"^torch::autograd::THPVariable_(\w+)\(")
# a kernel a DispatchStub registered (REGISTER_DISPATCH(clamp_min_scalar_stub, &clamp_min_scalar_kernel_impl)): the
# frame a lost walk keeps of PyTorch's elementwise ops when neither entry nor wrapper has a frame of its own (relu
# on an H100, 2026-12-06). Its name's head names the operator (clamp_min_scalar -> clamp_min), where the schemas
# hold one; a template's (gpu_kernel<...>) or a launcher's (launch_clamp_scalar) name is no stub's.
STUB_FRAME = re.compile(r"^at::native::(?:\(anonymous namespace\)::)*(\w+?)_kernel(?:_impl|_cuda)?\(")
ENTRY, WRAPPER, BINDING, STUB = "entry", "wrapper", "binding", "stub"  # what an operator frame is
TORCH_LIBRARY = "libtorch_cpu"  # the library whose .rodata has the schemas (a wrapper's own library has not)
_SCHEMA_END = b") -> "  # every schema string has it once, after its arguments
_NAME = re.compile(rb"([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z0-9_]+))?\(")


def read_schema_names(data: bytes) -> dict[str, str]:
    """struct name -> 'op.overload' (or 'op') from the schema strings in a library's .rodata."""
    readings: dict[str, list[tuple[int, str]]] = {}
    pos = data.find(_SCHEMA_END)
    while pos >= 0:
        start = data.rfind(b"\0", 0, pos) + 1
        m = _NAME.match(data, start, pos)
        if m:
            op, overload = m.group(1).decode(), (m.group(2) or b"").decode()
            for i in range(len(op)):  # the name and each of its tails (merged strings)
                tail = op[i:]
                if not (tail[0].isalpha() or tail[0] == "_"):
                    continue
                key = f"{tail}_{overload}" if overload else tail
                # an overload's split first (a name ending in _out or _dim is rarely an operator of its own),
                # then a whole name over a tail
                rank = (0 if overload else 2) + (0 if i == 0 else 1)
                readings.setdefault(key, []).append((rank, f"{tail}.{overload}" if overload else tail))
        pos = data.find(_SCHEMA_END, pos + len(_SCHEMA_END))
    return {key: min(found)[1] for key, found in readings.items()}


def library_names(path: str) -> dict[str, str]:
    """The table of one library file; empty when it has no .rodata or no schema strings."""
    with ElfFile(path) as elf:
        data = elf.section_data(".rodata")
    return read_schema_names(bytes(data)) if data else {}


class OperatorNames:
    """Operator frames' names, per library file by identity (a rebuilt library is read again)."""

    def __init__(self, files: FileCache) -> None:
        self.files = files
        self.failures = 0
        self._bases: dict[str, frozenset[str]] = {}  # path -> the operators' names without their overloads

    def table(self, path: str) -> dict[str, str]:
        try:
            ident = self.files.identify(path)
            return self.files.get(ident, KIND, lambda: library_names(path), _nbytes)
        except Exception:  # unreadable or not ELF: operators keep their struct names
            self.failures += 1
            return {}

    def name(self, struct: str, path: str | None, source: str = ENTRY) -> str | None:
        """'aten::mul.Tensor' for struct 'mul_Tensor' (or a wrapper's 'mul_Tensor', 'out_mm_out') read in the
        library at path; 'aten::<struct>' where the library has no schema for it (the name as is: its split
        is not known). A binding's name: 'aten::<name>' where the schemas have an operator of that name, else
        None (not an operator). A stub kernel's: 'aten::<the longest head of its name the schemas have>'
        (clamp_min_scalar: aten::clamp_min), else None."""
        table = self.table(path) if path else {}
        if source in (BINDING, STUB):
            bases = self._bases.get(path or "")
            if bases is None:
                bases = self._bases[path or ""] = frozenset(v.split(".", 1)[0] for v in table.values())
            if source == STUB:
                parts = struct.split("_")
                heads = ("_".join(parts[:i]) for i in range(len(parts), 0, -1))
                return next((f"{NAMESPACE}::{h}" for h in heads if h in bases), None)
            return f"{NAMESPACE}::{struct}" if struct in bases else None
        for key in wrapper_keys(struct) if source == WRAPPER else (struct,):
            if key in table:
                return f"{NAMESPACE}::{table[key]}"
        return f"{NAMESPACE}::{struct}"


def wrapper_keys(rest: str) -> list[str]:
    """The struct names a wrapper's name (after wrapper_<key>_) may stand for, most likely first."""
    # a leading _ is an empty overload (wrapper_SparseCPU__mm) more often than an operator named _x
    keys = [rest[1:], rest] if rest.startswith("_") else [rest]
    for i, ch in enumerate(rest):
        if ch == "_" and i > 0:
            overload, name = rest[:i], rest[i + 1 :]
            keys += [f"{name}_{overload}", f"{name.removesuffix('_' + overload)}_{overload}"]
    return keys


def operator_frame(frame_name: str) -> tuple[str, str] | None:
    """(struct, wrapper, binding or stub name, what the frame is: ENTRY, WRAPPER, BINDING or STUB) of an operator
    frame's demangled name; None for other frames."""
    for pattern, source in ((OPERATOR_FRAME, ENTRY), (WRAPPER_FRAME, WRAPPER), (BINDING_FRAME, BINDING),
                            (STUB_FRAME, STUB)):
        m = pattern.match(frame_name)
        if m:
            return m.group(1), source
    return None


def _nbytes(table: dict[str, str]) -> int:
    return sys.getsizeof(table) + sum(len(k) + len(v) + 98 for k, v in table.items())
