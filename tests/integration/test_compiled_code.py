"""torch.compile's kernels back to the model's lines (issue #33.2), on a real CPython target and a real CUDA
runtime without a GPU: launches from a module laid out as Inductor's wrapper, whose structured trace is the one
recorded from a torch.compile'd model on the H100 (tests/fixtures/torch_compile/trace_recompile.log.xz, the output
code of its recompile renamed to this test's wrapper)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jsonschema
from compiled_fixtures import recorded_trace
from harness import StdinTarget, capture_started, cuda_runtime, line_of, profile_phase
from profile_paths import walk
from rich.console import Console

from deepctx.cli.formats.html_payload import profile_payload
from deepctx.cli.formats.tree import render
from deepctx.daemon.store.wire import to_message as store_message
from deepctx.profiles.document import to_doc
from deepctx.profiles.merge import merge_documents
from deepctx.profiles.tree import from_doc

REPO = Path(__file__).resolve().parents[2]
TARGET = Path(__file__).resolve().parents[1] / "targets" / "gpu" / "compiled_launches.py"
RECORDED_WRAPPER = "/tmp/ic_recompile_0/os/costulbg4zh2a7hxcjqqe2a6stcxdbgdx7zl5kgmqntgzw7q5nev.py"  # compile 0/1's
MODEL = "/work/main/xind.py"  # the recorded model's path on the H100 host (tests/fixtures/torch_compile/model.py)
N = 300

WRAPPER = '''# AOT ID: ['0_forward']

triton_poi_fused_0 = async_compile.triton('triton_poi_fused_0', """
@triton_heuristics.pointwise(
    triton_meta={'signature': {'in_ptr0': '*fp32', 'out_ptr0': '*fp16', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}},
)
""", device_str='cuda')


def call(args):
    arg0_1 = None
    assert_size_stride(arg0_1, (64, 256), (256, 1))
    # Topologically Sorted Source Nodes: [x], Original ATen: [aten.t, aten.addmm]
    extern_kernels.mm(None, None, out=None)  # LINE_GEMM
    buf0 = empty_strided_cuda((64, 256), (256, 1), torch.float16)
    # Topologically Sorted Source Nodes: [x, relu, x_1, x_2, le], Original ATen: [aten.addmm, aten.relu, aten.mul, aten.add, aten.threshold_backward]
    stream0 = 0
    triton_poi_fused_0.run(arg0_1, buf0, 16384, stream=stream0)  # LINE_FUSED
    del stream0
    # Topologically Sorted Source Nodes: [y], Original ATen: [aten.t, aten.addmm]
    extern_kernels.addmm(None, None, out=None)  # LINE_GEMM2
'''
FUSED_BYTES = 64 * 256 * 4 + 64 * 256 * 2  # arg0_1 (f32) read, buf0 (f16) written: host/inductor_traffic.py


def wrapper_file(tmp: Path) -> Path:
    path = tmp / "os" / ("c" + "q" * 51 + ".py")  # named as Inductor names its modules
    path.parent.mkdir(parents=True)
    path.write_text(WRAPPER)
    return path


def run_target(daemon, tmp: Path, traced: bool) -> tuple[dict, Path]:
    wrapper = wrapper_file(tmp)
    env = dict(os.environ)
    env.pop("TORCH_TRACE", None)
    if traced:
        trace_dir = tmp / "trace"
        trace_dir.mkdir()
        text = recorded_trace("trace_recompile")
        assert RECORDED_WRAPPER in text
        (trace_dir / "dedicated_log_torch_trace_rank_0_test.log").write_text(text.replace(RECORDED_WRAPPER, str(wrapper)))
        env["TORCH_TRACE"] = str(trace_dir)
    t = StdinTarget([sys.executable, str(TARGET), cuda_runtime(), str(wrapper), str(N)], env=env)
    try:
        return profile_phase(daemon, t), wrapper
    finally:
        t.stop()


def kernels_by_line(doc: dict, wrapper: Path) -> dict[int, list[dict]]:
    """Kernel nodes by the wrapper line on their path."""
    out: dict[int, list[dict]] = {}
    for anc, n in walk(doc):
        if n["kind"] == "kernel":
            lines = [a["line"] for a in anc if a["kind"] == "python" and a["file"] == str(wrapper)]
            if lines:
                out.setdefault(lines[-1], []).append(n)
    return out


def test_kernels_of_compiled_code_carry_the_models_lines(daemon, tmp_path: Path) -> None:
    doc, wrapper = run_target(daemon, tmp_path, traced=True)
    by_line = kernels_by_line(doc, wrapper)
    fused, gemm, gemm2 = (line_of(wrapper, m) for m in ("LINE_FUSED", "LINE_GEMM", "LINE_GEMM2"))
    assert sorted(by_line) == sorted([fused, gemm, gemm2]), sorted(by_line)
    for line in (fused, gemm, gemm2):
        assert sum(n["metrics"]["calls"] for n in by_line[line]) == N, line

    def lines(line: int) -> list[tuple[str, int]]:
        froms = {tuple((s["file"], s["line"]) for s in n["compiled_from"]["lines"]) for n in by_line[line]}
        assert len(froms) == 1, froms
        return list(froms.pop())

    # compile 0/1's Dynamo graph: x from line 17, relu and x_1 from 18, x_2 from 19, y from 22 (le is not in it)
    assert lines(fused) == [(MODEL, 17), (MODEL, 18), (MODEL, 19)]
    assert lines(gemm) == [(MODEL, 17)]
    assert lines(gemm2) == [(MODEL, 22)]
    cf = by_line[fused][0]["compiled_from"]
    assert cf["nodes"] == ["x", "relu", "x_1", "x_2", "le"]
    assert cf["aten"] == ["aten.addmm", "aten.relu", "aten.mul", "aten.add", "aten.threshold_backward"]
    assert cf["compile_id"] == "0/1" and cf["output_code"] == str(wrapper)
    assert cf["bytes_per_launch"] == FUSED_BYTES
    assert by_line[gemm][0]["compiled_from"]["bytes_per_launch"] is None  # a library GEMM: not Inductor's kernel
    assert cf["lines"][0]["code"] == "x = self.fc1(x)  # LINE_FC1"
    assert doc["stats"]["compiled_kernel_paths"] == 3 and doc["stats"]["compiled_kernel_paths_without_lines"] == 0

    compiles = {c["id"]: c for c in doc["compiles"]}
    assert sorted(compiles) == ["0/0", "0/1"]
    assert compiles["0/0"]["recompile_reason"] is None
    assert compiles["0/1"]["recompile_reason"] == "0/0: tensor 'x' size mismatch at index 0. expected 64, actual 78"
    assert (compiles["0/1"]["function"], compiles["0/1"]["file"], compiles["0/1"]["line"]) == ("forward", MODEL, 16)
    called = compiles["0/1"]["called_from"]
    assert (called["file"], called["line"], called["function"]) == (MODEL, 32, "<module>")
    jsonschema.validate(doc, json.loads((REPO / "docs" / "profile.schema.json").read_text()))

    # the terminal: each kernel with its model lines, then the compiles with their causes; at 80 columns nothing
    # runs over (the deepest kernel's lines are elided there)
    for width in (80, 120):
        console = Console(width=width, record=True, highlight=False, soft_wrap=False, color_system=None)
        render(doc, "calls", min_percent=0, console=console)
        out = console.export_text()
        assert max(len(line) for line in out.splitlines()) <= width
        assert "from xind.py:17" in out and "torch.compile: 2 compiles" in out and "1 recompiles" in out, out
    assert "from xind.py:17, 18, 19" in out and "from xind.py:22" in out, out
    assert "recompiled: 0/0: tensor 'x' size mismatch at index 0" in out, out
    # a stored window keeps them (the store's wire and back), and a merge of windows of the process too
    stored = to_doc(store_message(doc))
    assert stored["compiles"] == doc["compiles"]
    assert [n.get("compiled_from") for _, n in walk(stored)] == [n.get("compiled_from") for _, n in walk(doc)]
    merged = merge_documents([stored, stored])
    assert merged is not None and merged["compiles"] == doc["compiles"]
    assert sorted(str(n["compiled_from"]) for _, n in walk(merged) if n.get("compiled_from")) == \
        sorted(str(n["compiled_from"]) for _, n in walk(doc) if n.get("compiled_from"))
    # the HTML report: the same note after each compiled kernel
    page = profile_payload(doc, from_doc(doc), "calls", {})
    notes = {page["strings"][i] for i in page["nodes"]["note"] if i >= 0}
    assert [c["id"] for c in page["compiles"]] == ["0/0", "0/1"]  # the report's Compiles tab
    assert notes == {"from xind.py:17", "from xind.py:17, 18, 19", "from xind.py:22"}, notes


def test_without_a_trace_kernels_keep_their_nodes_and_say_why_lines_are_missing(daemon, tmp_path: Path) -> None:
    doc, wrapper = run_target(daemon, tmp_path, traced=False)
    by_line = kernels_by_line(doc, wrapper)
    fused = line_of(wrapper, "LINE_FUSED")
    cf = by_line[fused][0]["compiled_from"]
    assert cf["lines"] == [] and cf["compile_id"] is None
    assert cf["nodes"] == ["x", "relu", "x_1", "x_2", "le"] and cf["aten"][0] == "aten.addmm"
    assert doc["stats"]["compiled_kernel_paths_without_lines"] == 3
    assert "compiles" not in doc
    assert any("TORCH_TRACE" in w for w in doc["warnings"]), doc["warnings"]


def test_compiles_written_until_the_target_exits_are_read(daemon, tmp_path: Path) -> None:
    """`deepctx run`'s capture ends with the process: the trace is read a last time then, through the process's
    root held open since the capture began. The recompile (0/1) and the output code of the launches are written to
    the trace after the launches, just before the target exits."""
    import concurrent.futures as cf

    wrapper = wrapper_file(tmp_path)
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    text = recorded_trace("trace_recompile").replace(RECORDED_WRAPPER, str(wrapper))
    cut = text.index("recompile_reasons")
    cut = text.rindex("\nV", 0, cut) + 1  # the records before the recompile's
    trace = trace_dir / "dedicated_log_torch_trace_rank_0_test.log"
    trace.write_text(text[:cut])
    env = {**os.environ, "TORCH_TRACE": str(trace_dir)}
    t = StdinTarget([sys.executable, str(TARGET), cuda_runtime(), str(wrapper), str(N)], env=env)
    try:
        with cf.ThreadPoolExecutor(1) as pool:
            fut = capture_started(pool, daemon, t)
            t.go()
            t.expect("done")
            with trace.open("a") as f:
                f.write(text[cut:])
            t.go()  # the target exits
            doc = fut.result()
    finally:
        t.stop()
    assert doc["ended"] == "target_exited", doc["ended"]
    assert [c["id"] for c in doc["compiles"]] == ["0/0", "0/1"]
    assert doc["compiles"][1]["recompile_reason"].startswith("0/0: tensor 'x' size mismatch")
    # (the launches' own Python frames may be [unknown] here: the target exits right after them, before deepctxd
    # reads their code objects; the tests above read them while it lives)


XLA_FIXTURE = REPO / "tests" / "fixtures" / "xla" / "module_0004.jit_deepctx_step.cpu_after_optimizations.txt"
JITTED = REPO / "tests" / "targets" / "gpu" / "jitted_launches.py"


def xla_module(caller: Path, caller_line: int, model_line: int, name: str) -> str:
    """The recorded module, its fused add renamed after the launch's kernel (getpid), its traced stack's outermost
    frame moved to (caller, caller_line) and its add's line to model_line."""
    text = XLA_FIXTURE.read_text().replace("%broadcast_add_fusion", "%getpid").replace("jit_deepctx_step", name)
    text = text.replace('1 "/tmp/jx2.py"', f'1 "{caller}"')
    text = text.replace("1 {file_name_id=1 function_name_id=1 line=17 ", f"1 {{file_name_id=1 function_name_id=1 line={caller_line} ")
    return text.replace("3 {file_name_id=1 function_name_id=3 line=10 ", f"3 {{file_name_id=1 function_name_id=3 line={model_line} ")


def test_jax_kernels_carry_their_fusions_lines_from_xlas_dump(daemon, tmp_path: Path) -> None:
    """Two dumped modules have a fusion of the launch's name (as most JAX modules have a loop_add_fusion): the
    one whose traced stacks hold the launch path's caller line is taken."""
    dump = tmp_path / "xla"
    dump.mkdir()
    caller = line_of(JITTED, "LINE_CALLER")
    (dump / "module_0004.jit_deepctx_step.sm_9.0_gpu_after_optimizations.txt").write_text(
        xla_module(JITTED, caller, 901, "jit_deepctx_step"))
    (dump / "module_0007.jit_other.sm_9.0_gpu_after_optimizations.txt").write_text(
        xla_module(Path("/srv/elsewhere.py"), 5, 902, "jit_other"))
    (dump / "module_0004.jit_deepctx_step.sm_9.0_gpu_after_optimizations-buffer-assignment.txt").write_text("x")
    env = {**{k: v for k, v in os.environ.items() if k != "TORCH_TRACE"},
           "XLA_FLAGS": f"--xla_gpu_autotune_level=0 --xla_dump_to={dump} --xla_dump_hlo_as_text"}
    t = StdinTarget([sys.executable, str(JITTED), cuda_runtime(), str(N)], env=env)
    try:
        doc = profile_phase(daemon, t)
    finally:
        t.stop()
    kernels = [n for anc, n in walk(doc) if n["kind"] == "kernel" and any(
        a["kind"] == "python" and a["line"] == caller and a["file"] == str(JITTED) for a in anc)]
    assert sum(n["metrics"]["calls"] for n in kernels) == N
    cf = kernels[0]["compiled_from"]
    assert cf["framework"] == "xla" and cf["compile_id"] == "jit_deepctx_step"
    assert cf["output_code"].endswith("module_0004.jit_deepctx_step.sm_9.0_gpu_after_optimizations.txt")
    # helper()'s line for tanh and mul, the moved line for the add
    assert [(s["file"], s["line"]) for s in cf["lines"]] == [(str(JITTED), 4), (str(JITTED), 901)]
    assert cf["nodes"] == ["jit(deepctx_step)/add", "jit(deepctx_step)/tanh", "jit(deepctx_step)/mul"]
    assert doc["stats"]["compiled_kernel_paths"] >= 1 and doc["stats"]["compiled_kernel_paths_without_lines"] == 0
