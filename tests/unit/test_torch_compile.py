"""torch.compile's files parsed as text (host/torch_compile.py), on the wrapper modules and structured traces
recorded from a torch.compile'd model on the H100 (tests/fixtures/torch_compile/, the model is model.py there,
run from /work/main/xind.py)."""

from __future__ import annotations

import os
from pathlib import Path

from compiled_fixtures import RecordedWrapper, recorded_trace

from deepctx.host.compiled_sources import CompiledSources
from deepctx.host.torch_compile import (
    complete_part,
    is_backward_wrapper,
    is_wrapper_file,
    parse_trace,
    parse_wrapper,
    writer_pid,
)

FORWARD = RecordedWrapper("cdlu5sxvizxhfj5ccbcng76aoujrpgsc2zv4dn37xgooawdr5lmp.py")
BACKWARD = RecordedWrapper("cxt3lqcj7v6vwbzxhcgoytsmr6vqosuchim3pedwbuodrsfrh6uf.py")
RECORDED = "/tmp/ic_default_0/{}/{}"
MODEL = "/work/main/xind.py"


def launches(path: RecordedWrapper) -> dict[str, tuple[int, list[str], list[str]]]:
    """Each launch statement's callee -> (line, nodes, aten)."""
    text = path.read_text()
    lines = text.splitlines()
    out = {}
    for number, site in parse_wrapper(text).items():
        stmt = lines[number - 1].strip()
        if ".run(" in stmt or stmt.startswith("extern_kernels."):
            out[stmt.split("(")[0]] = (number, list(site.nodes), list(site.aten))
    return out


def test_wrapper_launch_sites() -> None:
    got = launches(FORWARD)
    assert got == {
        "extern_kernels.mm": (227, ["x"], ["aten.t", "aten.addmm"]),
        "triton_poi_fused_add_addmm_mul_relu_threshold_backward_0.run":
            (233, ["x", "relu", "x_1", "x_2", "le"],
             ["aten.addmm", "aten.relu", "aten.mul", "aten.add", "aten.threshold_backward"]),
        "extern_kernels.addmm": (237, ["y"], ["aten.t", "aten.addmm"]),
        "triton_red_fused_mean_mul_1.run": (242, ["mul_1", "mean"], ["aten.mul", "aten.mean"]),
        "triton_per_fused_mean_mul_2.run": (247, ["mul_1", "mean"], ["aten.mul", "aten.mean"]),
    }
    # the launch's preparation line belongs to its site; the kernels' definitions (module level) do not launch
    sites = parse_wrapper(FORWARD.read_text())
    assert sites[232] == sites[233] and 231 not in sites


def test_every_kernel_maps_to_the_models_lines() -> None:
    trace = parse_trace(recorded_trace("trace_default"))
    fwd = RECORDED.format("dl", FORWARD.name)
    bwd = RECORDED.format("xt", BACKWARD.name)
    assert trace.output_code == {fwd: "0/0", bwd: "0/0"}

    def lines(wrapper: str, path: RecordedWrapper) -> list[tuple[str, list[int]]]:
        """Each launch in the order of the wrapper's lines: its callee and its model lines."""
        text = path.read_text()
        sites, stmts = parse_wrapper(text), text.splitlines()
        return [(stmts[n - 1].strip().split("(")[0], [s.line for s in trace.lines(wrapper, site, is_backward_wrapper(text))])
                for n, site in sorted(sites.items())
                if ".run(" in stmts[n - 1] or stmts[n - 1].strip().startswith("extern_kernels.")]

    assert lines(fwd, FORWARD) == [
        ("extern_kernels.mm", [17]), ("triton_poi_fused_add_addmm_mul_relu_threshold_backward_0.run", [17, 18, 19]),
        ("extern_kernels.addmm", [22]), ("triton_red_fused_mean_mul_1.run", [23]), ("triton_per_fused_mean_mul_2.run", [23])]
    assert not is_backward_wrapper(FORWARD.read_text()) and is_backward_wrapper(BACKWARD.read_text())
    # backward kernels carry the forward lines they differentiate (AOT's backward graph's comments)
    # (the loss's gradient and fc2's bias gradient fused; fc2's two GEMMs; relu's mask with fc1's bias gradient)
    assert lines(bwd, BACKWARD) == [
        ("triton_per_fused_add_div_expand_mul_sum_0.run", [22, 23]), ("extern_kernels.mm", [22]),
        ("extern_kernels.mm", [22]), ("triton_per_fused_mul_sum_threshold_backward_1.run", [17, 18]),
        ("extern_kernels.mm", [17, 18])]
    assert {s.file for site in parse_wrapper(FORWARD.read_text()).values() for s in trace.lines(fwd, site)} == {MODEL}
    assert trace.lines("/elsewhere/c" + "a" * 51 + ".py", parse_wrapper(FORWARD.read_text())[233]) == []


def test_graph_break_and_recompile() -> None:
    brk = parse_trace(recorded_trace("trace_break"), lambda f: "/site-packages/" in f)
    first, resumed = brk.compiles["0/0"], brk.compiles["1/0"]
    assert [(b.file, b.line) for b in first.graph_breaks] == [(MODEL, 21)]
    assert first.graph_breaks[0].reason.startswith("Dynamo does not know how to trace builtin operator `print`")
    assert (resumed.function, resumed.line, resumed.graph_breaks) == ("torch_dynamo_resume_in_forward_at_21", 21, [])
    assert first.called_from is not None and (first.called_from.file, first.called_from.line) == (MODEL, 32)
    rec = parse_trace(recorded_trace("trace_recompile"))
    assert rec.compiles["0/0"].recompile_reason is None
    assert rec.compiles["0/1"].recompile_reason == "0/0: tensor 'x' size mismatch at index 0. expected 64, actual 78"
    assert rec.compiles["0/1"].ops == 7 and rec.compiles["0/1"].time_s > 0


def test_wrapper_file_names() -> None:
    assert is_wrapper_file(str(FORWARD)) and is_wrapper_file("c" + "0" * 51 + ".py")
    assert not is_wrapper_file("/x/model.py") and not is_wrapper_file("/x/c" + "a" * 50 + ".py")
    assert not is_wrapper_file("/x/Cdlu5sxvizxhfj5ccbcng76aoujrpgsc2zv4dn37xgooawdr5lmp.py")


def test_a_trace_read_while_it_grows_says_what_it_says_whole() -> None:
    """deepctxd reads a trace again as it grows, whole records only (host/compiled_sources.py): cut anywhere, the
    records parsed in two reads are those of one."""
    data = recorded_trace("trace_recompile").encode()
    whole = parse_trace(data.decode())
    for cut in (len(data) // 3, len(data) // 2, data.index(b"recompile_reasons") + 5):
        first = complete_part(data[:cut])
        assert first > 0 and data[first:first + 1] in (b"V", b"I", b"W", b"E")
        trace = parse_trace(data[:first].decode())
        parse_trace(data[first:].decode(), into=trace)
        assert trace.output_code == whole.output_code and trace.nodes == whole.nodes
        assert {k: (c.recompile_reason, c.time_s) for k, c in trace.compiles.items()} == \
            {k: (c.recompile_reason, c.time_s) for k, c in whole.compiles.items()}
    assert complete_part(data[:10]) == 0


def test_a_shared_trace_directory_keeps_each_process_to_its_own_compiles() -> None:
    """Ranks of one job (or earlier runs) may share TORCH_TRACE: each record's glog prefix names its writer."""
    assert writer_pid(recorded_trace("trace_recompile")) == 3208
    assert writer_pid(recorded_trace("trace_default")) == 2708
    sources = CompiledSources(os.getpid())
    sources.ns_pid = 3208  # as if this process had written trace_recompile.log
    for name in ("trace_recompile", "trace_default"):
        sources._traces[name] = (0, parse_trace(recorded_trace(name)))
    assert [c.compile_id for c in sources.compiles()] == ["0/0", "0/1"]
    sources.ns_pid = 2708
    assert [c.compile_id for c in sources.compiles()] == ["0/0"]
    sources.ns_pid = 1  # neither: nothing said of another process's compiles
    assert sources.compiles() == []


def test_report_prints_the_compiles_under_the_tree(tmp_path: Path) -> None:
    """`deepctx report FILE` (the top-down view) lists the compiles with their causes, as attach and run do."""
    import json
    import subprocess
    import sys

    doc = {"schema": "deepctx.profile/v1", "pid": 1, "command": "python train.py", "hostname": "h",
           "started_unix": 0.0, "duration_s": 1.0, "ended": "stopped", "sample_hz": 99, "mode": None,
           "metrics": ["cpu_samples"], "stats": {}, "warnings": [],
           "root": {"kind": "root", "name": "python train.py", "file": None, "line": None, "module": None,
                    "metrics": {"cpu_samples": 5}, "children": []},
           "compiles": [{"id": "0/1", "function": "forward", "file": "/srv/model.py", "line": 16,
                         "recompile_reason": "0/0: tensor 'x' size mismatch at index 0. expected 64, actual 78",
                         "fail_reason": None, "time_s": 2.4, "ops": 7, "start_unix": None,
                         "graph_breaks": [{"file": "/srv/model.py", "line": 21, "reason": "print"}],
                         "called_from": {"file": "/srv/train.py", "line": 32, "function": "<module>", "code": None}}]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, "-m", "deepctx.cli.main", "report", str(path), "--no-findings"],
                       capture_output=True, text=True, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "torch.compile: 1 compiles (2.4 s), 1 recompiles, 1 graph breaks" in r.stdout, r.stdout
    assert "0/1  forward (model.py:16) called at train.py:32" in r.stdout
    assert "graph break at model.py:21: print" in r.stdout
