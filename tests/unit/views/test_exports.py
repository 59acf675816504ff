"""Exports on the fixtures and synthetic profiles: pprof, speedscope, chrome, hatchet, folded (exact values)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
import recorded
from harness import line_of
from synth import trace_events

from deepctx.cli.formats.chrome import ChromeTrace
from deepctx.cli.formats.exporter import exporters
from deepctx.cli.formats.folded import FoldedStacks
from deepctx.cli.formats.hatchet import HatchetLiteral
from deepctx.cli.formats.speedscope import Speedscope
from deepctx.cli.main import main
from deepctx.cli.views.document import load
from deepctx.profiles.exporter import ExportOptions
from deepctx.profiles.fold import SHOW_ALL, VIEWS_DEFAULT, Fold
from deepctx.profiles.pprof import Pprof
from deepctx.profiles.tree import from_doc
from deepctx.proto.pprof import profile_pb2

HERE = Path(__file__).resolve().parent


def test_registry_has_every_format() -> None:
    assert sorted(exporters()) == ["chrome", "folded", "hatchet", "pprof", "speedscope"]


def test_folded_lines_sum_to_the_metric_total(torch_doc, gpu_doc) -> None:
    anc, kernel = recorded.elementwise(torch_doc)
    text = FoldedStacks().export(torch_doc, ExportOptions(metric="calls"))
    lines = text.splitlines()
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == recorded.metric_total(torch_doc, "calls")
    assert len(lines) == sum(1 for _, n in recorded.nodes(torch_doc) if n["metrics"]["calls"])
    hot = [line for line in lines if line.endswith(" 1000")]
    thread = anc[0]
    assert thread["kind"] == "thread" and thread["tid"] == torch_doc["pid"]
    assert len(hot) == 1 and hot[0].startswith(f"[thread] python3 ({torch_doc['pid']});")
    mul = next(a for a in anc if a["name"] == "multiply")
    assert f";multiply ({mul['file']}:{line_of(recorded.TORCH_TARGET, 'LINE_MUL')});" in hot[0]
    assert hot[0].endswith(f"cudaLaunchKernel [api];{kernel['name']} [kernel] 1000") and hot[0].count(";") == len(anc)
    py = FoldedStacks().export(gpu_doc, ExportOptions(metric="cpu_samples"))
    assert "[thread] python3 (4242);<module> (" in py and "main (" in py and py.count("\n") == 3


def test_pprof_parses_with_every_metric_and_labels(torch_doc) -> None:
    anc, kernel = recorded.elementwise(torch_doc)
    prof = profile_pb2.Profile()
    prof.ParseFromString(gzip.decompress(Pprof().export(torch_doc, ExportOptions())))
    s = prof.string_table
    assert s[0] == ""
    assert [(s[t.type], s[t.unit]) for t in prof.sample_type] == [
        ("cpu_samples", "count"), ("calls", "count"), ("api_time", "nanoseconds"), ("gpu_time", "nanoseconds"),
        ("bytes", "bytes"), ("sync_wait", "nanoseconds")]
    assert s[prof.default_sample_type] == "cpu_samples"
    assert prof.period == 1_000_000_000 // 99 and s[prof.period_type.unit] == "nanoseconds"
    totals = [sum(x.value[i] for x in prof.sample) for i in range(6)]
    assert totals == [recorded.metric_total(torch_doc, m) for m in torch_doc["metrics"]]
    assert totals[1] == 1201 and all(totals[i] for i in (0, 1, 2, 4, 5))
    funcs = {f.id: f for f in prof.function}
    locs = {loc.id: loc for loc in prof.location}
    hot = next(x for x in prof.sample if x.value[1] == 1000)
    leaf = funcs[locs[hot.location_id[0]].line[0].function_id]
    assert s[leaf.name] == kernel["name"]
    caller = funcs[locs[hot.location_id[1]].line[0].function_id]
    assert s[caller.name] == "cudaLaunchKernel" and s[caller.filename] == "libcudart.so.13"
    labels = {s[lab.key]: (s[lab.str] if lab.str else lab.num) for lab in hot.label}
    thread = anc[0]
    assert labels == {"pid": torch_doc["pid"], "thread": thread["name"], "tid": thread["tid"], "kind": "kernel",
                      "stream": kernel["stream"]}
    assert (thread["name"], thread["tid"], kernel["stream"]) == ("python3", torch_doc["pid"], 0)
    native = next(loc for loc in prof.location if loc.mapping_id)
    assert s[prof.mapping[native.mapping_id - 1].filename]


def test_pprof_python_frames_have_lines(gpu_doc) -> None:
    prof = profile_pb2.Profile()
    prof.ParseFromString(gzip.decompress(Pprof().export(gpu_doc, ExportOptions())))
    s = prof.string_table
    funcs = {f.id: f for f in prof.function}
    lines = {(s[funcs[loc.line[0].function_id].name], loc.line[0].line) for loc in prof.location}
    assert {("multiply", 7), ("read_scalars", 14), ("main", 21), ("main", 22)} <= lines


def test_speedscope_follows_its_schema(torch_doc) -> None:
    _, kernel = recorded.elementwise(torch_doc)
    calls_total = recorded.metric_total(torch_doc, "calls")
    schema = json.loads((HERE / "speedscope-file-format-schema.json").read_text())
    out = json.loads(Speedscope().export(torch_doc, ExportOptions()))
    jsonschema.validate(out, schema)
    by_name = {p["name"]: p for p in out["profiles"]}
    calls = by_name["calls (calls)"]
    assert sum(calls["weights"]) == calls_total and calls["endValue"] == calls_total and calls["unit"] == "none"
    assert by_name["API time (api_time_ns)"]["unit"] == "nanoseconds"
    frames = out["shared"]["frames"]
    hot = calls["samples"][calls["weights"].index(1000)]
    assert frames[hot[-1]]["name"] == f"{kernel['name']} [kernel]"
    assert frames[hot[0]]["name"] == f"[thread] python3 ({torch_doc['pid']})"


def test_hatchet_literal_has_self_and_inclusive_metrics(torch_doc) -> None:
    _, recorded_kernel = recorded.elementwise(torch_doc)
    name = recorded_kernel["name"]
    roots = json.loads(HatchetLiteral().export(torch_doc, ExportOptions(fold=SHOW_ALL)))  # every recorded node
    assert len(roots) == 1
    root = roots[0]
    assert root["frame"]["type"] == "root" and root["metrics"]["calls"] == 0
    assert root["metrics"]["calls (inc)"] == recorded.metric_total(torch_doc, "calls")
    stack, kernels, count = [root], [], 0
    while stack:
        x = stack.pop()
        count += 1
        if x["frame"]["name"] == name:
            kernels.append(x)
        stack.extend(x["children"])
    assert count == recorded.node_count(torch_doc) and len(kernels) == 1
    kernel = kernels[0]
    assert kernel["metrics"]["calls"] == 1000 and kernel["metrics"]["calls (inc)"] == 1000
    assert kernel["metrics"]["api_time_ns"] == recorded_kernel["metrics"]["api_time_ns"]
    assert kernel["frame"] == {"name": name, "type": "kernel"}


def test_chrome_aggregated_layout_from_a_tree(gpu_doc) -> None:
    out = json.loads(ChromeTrace().export(gpu_doc, ExportOptions()))
    assert out["deepctx"]["synthetic"] is True and out["distributedInfo"]["rank"] == 0
    ev = out["traceEvents"]
    cats = Counter(e["cat"] for e in ev if e["ph"] == "X")
    assert cats["kernel"] == 1 and cats["gpu_memcpy"] == 1 and cats["cuda_sync"] == 1 and cats["cuda_runtime"] == 3
    kernel = next(e for e in ev if e.get("cat") == "kernel")
    assert kernel["dur"] == 2000.0 and kernel["pid"] == 0 and kernel["tid"] == 7  # 1000 x 2 us on stream 7
    assert kernel["args"]["calls"] == 1000 and kernel["args"]["grid"] == [1, 1, 1]
    flows = [e for e in ev if e.get("cat") == "ac2g"]
    assert {e["ph"] for e in flows} == {"s", "f"} and len(flows) == 2 * 3
    start = next(e for e in flows if e["ph"] == "s" and e["id"] == kernel["args"]["correlation"])
    launch = next(e for e in ev if e.get("cat") == "cuda_runtime" and e["name"] == "cudaLaunchKernel")
    assert start["ts"] == launch["ts"] and launch["dur"] == 7000.0  # 1000 x 7 us API time
    main = next(e for e in ev if e.get("name") == "main" and e["args"].get("line") == 21)
    assert main["ts"] <= launch["ts"] and launch["ts"] + launch["dur"] <= main["ts"] + main["dur"]  # nested
    names = {e["args"]["name"] for e in ev if e["ph"] == "M"}
    assert {"GPU 0", "stream 7", "python3 (4242)"} <= names


def test_chrome_from_a_recorded_trace(gpu_doc) -> None:
    doc = dict(gpu_doc, trace=trace_events())
    out = json.loads(ChromeTrace().export(doc, ExportOptions()))
    assert out["deepctx"]["synthetic"] is False
    ev = out["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    assert [k["dur"] for k in kernels] == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert all(k["args"]["correlation"] == k["args"]["External id"] for k in kernels)
    f = [e for e in ev if e.get("cat") == "ac2g" and e["ph"] == "f"]
    assert sorted(e["id"] for e in f) == [100, 101, 102, 103, 104, 200]
    assert '"rank": 0' in ChromeTrace().export(doc, ExportOptions())  # HTA's rank pattern needs the space


def test_export_command_writes_each_format(tmp_path, torch_doc, capsys) -> None:
    src = tmp_path / "prof.json"
    src.write_text(json.dumps(torch_doc))
    for fmt, suffix in (("pprof", ".pb.gz"), ("speedscope", ".speedscope.json"), ("chrome", ".trace.json"),
                        ("hatchet", ".hatchet.json"), ("folded", ".folded")):
        assert main(["export", str(src), "--to", fmt]) == 0
        assert (tmp_path / f"prof{suffix}").stat().st_size > 1000
    assert main(["export", str(src), "--to", "folded", "--metric", "calls", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert sum(int(line.rsplit(" ", 1)[1]) for line in out.splitlines()) == recorded.metric_total(torch_doc, "calls")
    assert main(["export", str(src), "--to", "folded", "--metric", "nope"]) == 2


def test_exports_of_every_fixture_are_consistent(jax_doc, triton_doc) -> None:
    for doc in (jax_doc, triton_doc):
        total = doc["stats"]["cpu_samples_in_profile"]
        assert total == recorded.metric_total(doc, "cpu_samples")
        folded = FoldedStacks().export(doc, ExportOptions(metric="cpu_samples"))
        assert sum(int(line.rsplit(" ", 1)[1]) for line in folded.splitlines()) == total
        prof = profile_pb2.Profile()
        prof.ParseFromString(gzip.decompress(Pprof().export(doc, ExportOptions())))
        assert sum(x.value[0] for x in prof.sample) == total
        assert [sum(x.value[i] for x in prof.sample) for i in range(len(doc["metrics"]))] == [
            recorded.metric_total(doc, m) for m in doc["metrics"]]


# start-up frames above one Python path and 158 plumbing frames (test_narrow_terminals' report of it)
RESNET = HERE.parents[1] / "fixtures" / "profiles" / "h200_resnet50_trace.json.xz"
FOLD_FLAGS = {(): VIEWS_DEFAULT, ("--show-startup",): Fold(startup=False), ("--show-plumbing",): Fold(plumbing=False)}


@pytest.fixture(scope="module")
def resnet_tree_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The capture without its recorded trace: chrome then lays out the tree, which folding shapes."""
    doc = load(str(RESNET))
    del doc["trace"]
    path = tmp_path_factory.mktemp("resnet") / "resnet.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("fmt", ["pprof", "speedscope", "chrome", "hatchet", "folded"])
def test_exports_fold_as_report_does(fmt: str, resnet_tree_only: Path, tmp_path: Path) -> None:
    """Every format folds start-up and plumbing frames by default, and --show-startup / --show-plumbing keep
    them, as report and its HTML do (#34.9)."""
    shown = {}
    for i, flags in enumerate(FOLD_FLAGS):
        out = tmp_path / f"out{i}"
        assert main(["export", str(resnet_tree_only), "--to", fmt, "-o", str(out), *flags]) == 0
        data = out.read_bytes()
        if fmt == "pprof":  # the frames' names are the string table's
            prof = profile_pb2.Profile()
            prof.ParseFromString(gzip.decompress(data))
            text = "\n".join(prof.string_table)
        else:
            text = data.decode()
        shown[flags] = ("__libc_start_main" in text, "Module._call_impl" in text)
        if fmt == "hatchet":  # node for node the tree report shows with the same flags
            stack, count = json.loads(text), 0
            while stack:
                count += 1
                stack.extend(stack.pop()["children"])
            assert count == len(list(from_doc(load(str(resnet_tree_only)), FOLD_FLAGS[flags]).walk()))
            assert count == {(): 13221, ("--show-startup",): 13253, ("--show-plumbing",): 13339}[flags]
    assert shown == {(): (False, False), ("--show-startup",): (True, False), ("--show-plumbing",): (False, True)}
