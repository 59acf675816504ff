"""PyTorch operators as nodes (#33.1), on the real CUDA runtime without a GPU: a miniature of ATen
(tests/targets/ops/: libtorch_cpu.so with the entry points and the schema strings in .rodata, libtorch_cuda.so
with a registered CUDA kernel) launches from Python lines; each launch's path carries `aten::<op>[.<overload>]`
nodes between the line and the launch, one per operator (not again for its redispatch), also where the
frame-pointer walk lost the entry points (from the CUDA kernel's wrapper), and the views fold the native
frames around them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from harness import cuda_runtime, line_of, profile_in_own_daemon
from profile_paths import walk

from deepctx.profiles.fold import Fold
from deepctx.profiles.tree import ViewNode, from_doc

TARGET = Path(__file__).resolve().parents[1] / "targets" / "gpu" / "ops_calls.py"
ROUNDS, GEMMS, REDUCES, MULS, CONVS, BMMS, RELUS = 5, 3, 2, 4, 2, 3, 2  # ops_calls.py's


@pytest.fixture(scope="module")
def ops_doc(tmp_path_factory: pytest.TempPathFactory, native_targets: Path) -> dict:
    return capture_ops(tmp_path_factory.mktemp("ops"), native_targets)


def capture_ops(home: Path, native_targets: Path, config: str = "") -> dict:
    return profile_in_own_daemon(home, [sys.executable, str(TARGET), str(native_targets / "torch" / "libtorch_cpu.so"),
                                        cuda_runtime()], config)


def launches(doc: dict, marker: str, kernel: str) -> list[tuple[list[dict], dict]]:
    line = line_of(TARGET, marker)
    return [(anc, n) for anc, n in walk(doc) if n["kind"] == "kernel" and n["name"] == kernel
            and any(a["kind"] == "python" and a["line"] == line for a in anc)]


@pytest.mark.parametrize(("marker", "kernel", "per_round", "ops", "entry"), [
    ("LINE_MATMUL", "gemm_kernel", GEMMS, ["aten::matmul", "aten::mm"], "at::_ops::mm::call(long)"),
    ("LINE_SUM", "reduce_kernel", REDUCES, ["aten::sum.dim_IntList"], "at::_ops::sum_dim_IntList::call(long)"),
    ("LINE_ADDMM", "gemm_kernel", GEMMS, ["aten::addmm"], "at::_ops::addmm::call(long)"),
    # the entry points lost: the operator from libtorch_cuda's wrapper, named from libtorch_cpu's schemas
    ("LINE_MUL", "mul_kernel", MULS, ["aten::mul.Tensor"], "at::wrapper_CUDA_mul_Tensor(long)"),
    # entry and wrapper lost (cuDNN's frames): the operator from its Python binding, without its overload
    ("LINE_CONV", "conv_kernel", CONVS, ["aten::conv2d"], "torch::autograd::THPVariable_conv2d(long)"),
    # entry, wrapper and binding lost above the stub kernel clamp_min registered: the operator from its name
    ("LINE_RELU", "relu_kernel", RELUS, ["aten::clamp_min"],
     "at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl(long)"),
])
def test_each_launch_carries_its_operators(ops_doc: dict, marker: str, kernel: str, per_round: int,
                                           ops: list[str], entry: str) -> None:
    found = launches(ops_doc, marker, kernel)
    assert sum(n["metrics"]["calls"] for _, n in found) == ROUNDS * per_round
    line = line_of(TARGET, marker)
    for anc, _ in found:
        kinds = [(a["kind"], a["name"]) for a in anc]
        assert [a["name"] for a in anc if a["kind"] == "op"] == ops, kinds
        py = max(i for i, a in enumerate(anc) if a["kind"] == "python")
        assert anc[py]["line"] == line, kinds
        inner = next(i for i, a in enumerate(anc) if a["kind"] == "op" and a["name"] == ops[-1])
        # the operator stands right above its entry frame, below the line, with the native frames kept
        assert py < inner and anc[inner + 1]["name"] == entry, kinds
        assert anc[inner]["module"] == ("libtorch_cuda.so" if marker in ("LINE_MUL", "LINE_RELU") else "libtorch_cpu.so"), \
            anc[inner]
        if marker in ("LINE_MUL", "LINE_CONV", "LINE_RELU"):  # the frame-pointer walk skipped the frameless entries
            assert not [a for a in anc if a["name"].startswith("at::_ops::")], kinds
        assert anc[-1]["kind"] == "api" and anc[-1]["name"] == "cudaLaunchKernel", kinds


def test_the_views_fold_the_native_frames_around_operators(ops_doc: dict) -> None:
    line = line_of(TARGET, "LINE_MATMUL")

    def path_below_line(root: ViewNode) -> list[tuple[str, str]]:
        """The launches' one path below the line. A CPU sample may hang beside it (its own native walk,
        which CI once saw lose the frames between the line and cudaLaunchKernel): it carries no call."""
        node = next(n for n in root.walk() if n.frame.kind == "python" and n.frame.line == line)
        path = []
        while node.children:
            launching = [c for c in node.children if any(d.self.get("calls") for d in c.walk())]
            assert len(launching) == 1, [c.frame for c in node.children]
            node = launching[0]
            path.append((node.frame.kind, node.frame.name))
        return path

    folded = path_below_line(from_doc(ops_doc, Fold()))
    assert folded == [("op", "aten::matmul"), ("op", "aten::mm"), ("api", "cudaLaunchKernel"), ("kernel", "gemm_kernel")]
    shown = path_below_line(from_doc(ops_doc, Fold(dispatch=False)))
    names = [n for _, n in shown]
    assert names.index("ops_matmul") < names.index("aten::matmul") < names.index("at::_ops::matmul::call(long)") \
        < names.index("aten::mm") < names.index("at::_ops::mm::call(long)") < names.index("at::_ops::mm::redispatch(int, long)") \
        < names.index("at::native::mm_cuda(long)") < names.index("cudaLaunchKernel"), shown
    root = from_doc(ops_doc, Fold())
    assert root.extra["folded"]["dispatch"] >= 6  # ops_matmul, the entries, redispatch, mm_cuda, launch_stub...


def test_where_the_frame_pointer_walk_is_lost_the_eh_frame_walk_takes_over(
        ops_doc: dict, tmp_path: Path, native_targets: Path) -> None:
    """bmm's CUDA side uses rbp for data and has cuBLASLt launch: the frame-pointer walk is lost there. By default
    (gpu_native_continue) the .eh_frame walk goes on from the lost frame for the calls a GEMM library makes, and
    the entry and `aten::bmm` are on the path, the frames below the walk's loss kept as they were; no other
    launch is continued (their operators come from the frames the walk kept). Turned off, the path has neither
    the operator's entry nor its node."""
    def bmm_paths(doc: dict) -> list[list[tuple[str, str]]]:
        found = launches(doc, "LINE_BMM", "gemm_kernel")
        assert sum(n["metrics"]["calls"] for _, n in found) == ROUNDS * BMMS
        return [[(a["kind"], a["name"]) for a in anc] for anc, _ in found]

    for kinds in bmm_paths(ops_doc):  # the default
        entry = kinds.index(("native", "at::_ops::bmm::call(long)"))
        assert kinds[entry - 1] == ("op", "aten::bmm"), kinds
        assert kinds[entry + 1:] == [("native", "at::native::bmm_cuda(long)"), ("native", "cublasLtMatmul"),
                                     ("api", "cudaLaunchKernel")], kinds
        assert ("native", "ops_bmm") in kinds[:entry], kinds  # the binding above the entry: the walk went on
    # every continued walk is one memo hit or miss: the bmm launches', and no other launch's (GEMMS, MULS...)
    stats = ops_doc["stats"]
    assert stats["native_continue_memo_hits"] + stats["native_continue_memo_misses"] == ROUNDS * BMMS, stats
    off = capture_ops(tmp_path, native_targets, "gpu_native_continue = false\n")
    for kinds in bmm_paths(off):  # frame pointers only: the walk ends at bmm_cuda
        native = [k for k in kinds if k[0] == "native"]
        assert native == [("native", "at::native::bmm_cuda(long)"), ("native", "cublasLtMatmul")], kinds
        assert not [k for k in kinds if k[0] == "op"], kinds
    assert "native_continue_memo_hits" not in off["stats"]
