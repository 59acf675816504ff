"""CLI commands against a stand-in daemon (and a stand-in ClickHouse): gzipped outputs, the LOST column
of `status`, `diff --html --sort`, the window count of `fleet top`, and the one AttachRequest builder."""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from deepctx.cli.commands import attach, fleet, profile, run, status
from deepctx.cli.formats.chrome import ChromeTrace
from deepctx.cli.formats.speedscope import Speedscope
from deepctx.cli.main import main
from deepctx.cli.views.document import load
from deepctx.daemon.capture import CaptureResult
from deepctx.daemon.profile_wire import to_message
from deepctx.daemon.tree import CallTree
from deepctx.host.frames import Frame, thread_frame
from deepctx.profiles.document import to_doc
from deepctx.profiles.exporter import ExportOptions
from deepctx.profiles.pprof import Pprof
from deepctx.proto.pprof import profile_pb2
from deepctx.proto.v1 import deepctx_pb2 as pb

GZIP_MAGIC = b"\x1f\x8b"

AGENT = """
import array, os, socket
notify = socket.socket(fileno=int(os.environ["DEEPCTX_NOTIFY_FD"]))
mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
notify.sendmsg([os.getpid().to_bytes(4, "little", signed=True)],
               [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno()]))])
theirs.close()
assert mine.recv(1) == b"g"
"""


def profile_message(pid: int = 4242) -> pb.Profile:
    t = CallTree("python train.py")
    th = thread_frame(pid, "python3")
    step = Frame("python", "step", file="train.py", line=12)
    t.add([th, step, Frame("native", "matmul", module="libtorch.so")], "cpu_samples", 70)
    t.add([th, step, Frame("api", "cudaLaunchKernel", module="libcudart.so")], "calls", 40)
    t.add([th, Frame("python", "load", file="data.py", line=3)], "cpu_samples", 30)
    r = CaptureResult(pid=pid, command="python train.py", duration_s=2.0, started_unix=1_796_000_000.0,
                      ended="duration", sample_hz=99, tree=t, stats={"cpu_samples": 100}, hostname="h")
    return to_message(r)


class FakeDaemon:
    """The Profiler stub: records each AttachRequest and answers with one profile."""

    def __init__(self, sessions: list[pb.Session] | None = None) -> None:
        self.requests: list[pb.AttachRequest] = []
        self.sessions = sessions or []

    def Attach(self, req: pb.AttachRequest):  # noqa: N802 (gRPC's naming)
        self.requests.append(req)
        yield pb.AttachEvent(progress=pb.Progress(elapsed_s=0.0, duration_s=req.duration_s, message="capturing"))
        yield pb.AttachEvent(profile=profile_message(req.pid))

    def QueryProfile(self, req: pb.QueryProfileRequest) -> pb.QueryProfileReply:  # noqa: N802
        return pb.QueryProfileReply(profile=profile_message(), windows=1)

    def Status(self, req: pb.StatusRequest) -> pb.StatusReply:  # noqa: N802
        return pb.StatusReply(version="test", daemon_pid=1, max_duration_s=60.0, sessions=self.sessions)


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> FakeDaemon:
    d = FakeDaemon()
    connect = lambda path, timeout_s=10.0: d  # noqa: E731
    monkeypatch.setattr("deepctx.cli.client.connect", connect)  # analyze and report import it when they capture
    for mod in (attach, profile, run, status):
        monkeypatch.setattr(mod, "connect", connect)
    return d


def gunzip_json(path: Path) -> Any:
    raw = path.read_bytes()
    assert raw[:2] == GZIP_MAGIC
    return json.loads(gzip.decompress(raw))


# --- 1. -o PATH.gz is gzipped, and a gzipped FILE is read wherever a FILE is taken -------------------------

@pytest.mark.parametrize("argv", [
    ["attach", "4242", "--quiet", "--format", "json", "-o", "{out}"],
    ["analyze", "4242", "--quiet", "--format", "json", "--save", "{out}", "-o", "{tmp}/findings.json"],
    ["report", "--pid", "4242", "--save", "{out}", "--html", "{tmp}/r.html", "--no-findings"],
    ["profile", "--format", "json", "-o", "{out}"],
    ["run", "--quiet", "--agent", __file__, "--format", "json", "-o", "{out}", "--", sys.executable, "-c", "{agent}"],
])
def test_profiles_written_to_a_gz_path_are_gzipped(argv: list[str], daemon: FakeDaemon, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    out = tmp_path / "p.json.gz"
    assert main([a.format(out=out, tmp=tmp_path, agent=AGENT) for a in argv]) == 0
    expected = to_doc(profile_message(daemon.requests[0].pid if daemon.requests else 4242))
    assert gunzip_json(out) == expected
    assert load(out) == expected  # and read back wherever a FILE is taken


def test_plain_path_stays_plain(daemon: FakeDaemon, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    assert main(["attach", "4242", "--quiet", "-o", str(out), "--format", "json"]) == 0
    assert json.loads(out.read_text()) == to_doc(profile_message())


def test_trace_written_to_a_gz_path_is_gzipped(daemon: FakeDaemon, tmp_path: Path) -> None:
    out = tmp_path / "trace.json.gz"
    assert main(["attach", "4242", "--quiet", "--trace", "--format", "json", "-o", str(out)]) == 0
    assert gunzip_json(out) == json.loads(ChromeTrace().export(to_doc(profile_message()), ExportOptions()))


def test_exports_and_reports_of_a_gzipped_file_to_gz_paths(tmp_path: Path) -> None:
    doc = to_doc(profile_message())
    src = tmp_path / "p.json.gz"
    src.write_bytes(gzip.compress(json.dumps(doc).encode()))
    out = tmp_path / "p.speedscope.json.gz"
    assert main(["export", str(src), "--to", "speedscope", "-o", str(out)]) == 0
    assert gunzip_json(out) == json.loads(Speedscope().export(doc, ExportOptions()))
    # pprof is gzipped by its format already: written once, not gzipped twice
    assert main(["export", str(src), "--to", "pprof"]) == 0
    pprof = tmp_path / "p.pb.gz"
    assert pprof.read_bytes() == Pprof().export(doc, ExportOptions())
    assert len(profile_pb2.Profile.FromString(gzip.decompress(pprof.read_bytes())).sample) == 3
    analyzed = tmp_path / "a.json.gz"
    assert main(["analyze", str(src), "--format", "json", "-o", str(analyzed), "--quiet"]) == 0
    assert gunzip_json(analyzed)["pid"] == 4242 and "findings" in gunzip_json(analyzed)
    html = tmp_path / "r.html.gz"
    assert main(["report", str(src), "--html", str(html), "--no-findings"]) == 0
    assert gzip.decompress(html.read_bytes()).startswith(b"<!DOCTYPE html>")
    assert main(["diff", str(src), str(src), "--html", str(tmp_path / "d.html.gz")]) == 0
    assert gzip.decompress((tmp_path / "d.html.gz").read_bytes()).startswith(b"<!DOCTYPE html>")


# --- 2. status: every lost or dropped event ------------------------------------------------------------

LOSSES = {"cpu_samples": 500, "cpu_samples_in_profile": 499, "cpu_user_stacks_lost": 3, "cpu_samples_dropped_map_full": 1,
          "python_stacks": 400, "python_stack_map_full": 4, "python_new_stacks_lost": 2, "python_truncated": 8,
          "gpu_api_calls": 90, "gpu_api_stacks_lost": 5, "gpu_api_calls_dropped_map_full": 0,
          "device_records": 70, "device_records_dropped_by_cupti": 6, "device_batches_cut": 1,
          "device_trace_events_lost": 2, "store_failed": 3, "table_rows_dropped": 100, "cpu_stacks_truncated": 9}


def test_lost_text_counts_gpu_device_and_python_losses() -> None:
    assert status.lost_text(LOSSES) == "cpu 4, python 6, gpu 5, device 9"
    assert status.lost_text({"cpu_samples": 10, "cpu_user_stacks_lost": 0}) == "0"


def test_status_shows_every_lost_counter(daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    daemon.sessions = [pb.Session(id=7, pid=4242, command="python train.py", started_unix=0.0, duration_s=10.0,
                                  sample_hz=99, probes=["cpu", "python", "gpu", "device"], stats=LOSSES,
                                  state="capturing")]
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.lstrip().startswith("7 "))
    assert re.search(r"\b500\s+cpu 4, python 6, gpu 5, device 9\s+python train\.py", row), row
    assert ("session 7 (pid 4242) lost: cpu_samples_dropped_map_full 1, cpu_user_stacks_lost 3, "
            "device_batches_cut 1, device_records_dropped_by_cupti 6, device_trace_events_lost 2, "
            "gpu_api_stacks_lost 5, python_new_stacks_lost 2, python_stack_map_full 4\n") in out


# --- 3. diff --html honours --sort -------------------------------------------------------------------------

def diff_doc(a: dict[str, int], b: dict[str, int]) -> dict[str, Any]:
    metrics = ["cpu_samples", "calls"]

    def node(kind: str, name: str, values: dict[str, int] | None = None, children: list | None = None) -> dict:
        return {"kind": kind, "name": name, "file": "m.py" if kind == "python" else None,
                "line": 1 if kind == "python" else None, "module": None,
                "metrics": {m: (values or {}).get(m, 0) for m in metrics}, "children": children or []}

    root = node("root", "app", children=[node("python", "a", a), node("python", "b", b)])
    return {"schema": "deepctx.profile/v1", "pid": 1, "command": "app", "hostname": "", "started_unix": 0.0,
            "duration_s": 1.0, "ended": "duration", "sample_hz": 99, "mode": None, "metrics": metrics,
            "root": root, "stats": {}, "warnings": []}


def html_payload(path: Path) -> dict[str, Any]:
    m = re.search(r'<script id="deepctx-data" type="application/json">(.*?)</script>', path.read_text(), re.S)
    assert m
    return json.loads(m.group(1))


@pytest.mark.parametrize(("sort", "order"), [(None, ["a", "b"]), ("cpu_samples", ["a", "b"]), ("calls", ["b", "a"])])
def test_diff_html_rows_follow_sort(sort: str | None, order: list[str], tmp_path: Path) -> None:
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(diff_doc({"cpu_samples": 10, "calls": 5}, {"cpu_samples": 10, "calls": 5})))
    after.write_text(json.dumps(diff_doc({"cpu_samples": 50, "calls": 6}, {"cpu_samples": 20, "calls": 100})))
    out = tmp_path / "d.html"
    assert main(["diff", str(before), str(after), "--html", str(out), *(["--sort", sort] if sort else [])]) == 0
    data = html_payload(out)
    metric = sort or "cpu_samples"
    assert data["defaultMetric"] == metric and data["changes"]["path_metric"] == metric
    assert [p["path"][-1].split(" ")[0] for p in data["changes"]["paths"]] == order
    before_after = [(p["before"], p["after"]) for p in data["changes"]["paths"]]
    assert before_after == ([(5, 100), (5, 6)] if sort == "calls" else [(10, 50), (10, 20)])


# --- 4. fleet top: windows are distinct (host, pid, window_start), of every process ---------------------------

class FakeClickHouse:
    """Answers the queries fleet top sends, computed from call path rows as ClickHouse would."""

    database = "deepctx"

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.data = rows

    def rows(self, sql: str) -> list[dict[str, Any]]:
        sums = ("cpu_samples", "calls", "api_time_ns", "gpu_time_ns", "bytes", "sync_wait_ns")
        if "h_windows" in sql:
            return [{"h_windows": len({(r["host"], r["pid"], r["window_start"]) for r in self.data})}]
        if "GROUP BY host, pid, command, container" in sql:
            groups: dict[tuple, list[dict[str, Any]]] = {}
            for r in self.data:
                groups.setdefault((r["host"], r["pid"], r["command"], r["container"]), []).append(r)
            out = [{"host": k[0], "pid": k[1], "command": k[2], "container": k[3],
                    "windows": len({r["window_start"] for r in g}), **{f"t_{m}": sum(r[m] for r in g) for m in sums}}
                   for k, g in groups.items()]
            out.sort(key=lambda p: (-p["t_cpu_samples"], p["host"], p["pid"]))
            return out[:int(re.search(r"LIMIT (\d+)", sql).group(1))]
        if sql.startswith("SELECT count() AS rows"):
            return [{"rows": len(self.data), **{f"t_{m}": sum(r[m] for r in self.data) for m in sums}}]
        return []  # kernels, lines


def callpath_rows() -> list[dict[str, Any]]:
    """gpu-a pid 1: 3 windows of 2 call paths; gpu-a pid 2: 2 windows of 3; gpu-b pid 1: 1 window of 1."""
    out = []
    for host, pid, windows, paths, samples in (("gpu-a", 1, 3, 2, 50), ("gpu-a", 2, 2, 3, 20), ("gpu-b", 1, 1, 1, 5)):
        for w in range(windows):
            for p in range(paths):
                out.append({"host": host, "pid": pid, "command": f"cmd{pid}", "container": "", "window_start": 60 * w,
                            "path": p, "cpu_samples": samples, "calls": 0, "api_time_ns": 0, "gpu_time_ns": 0,
                            "bytes": 0, "sync_wait_ns": 0})
    return out


@pytest.mark.parametrize("n", [1, 2, 10])
def test_fleet_top_counts_every_window_once(n: int) -> None:
    data = fleet.fleet_top(FakeClickHouse(callpath_rows()), 0.0, 600.0, n)
    assert data["windows"] == 6  # not 13 call path rows, nor only the windows of the n processes shown
    assert [(p["host"], p["pid"], p["windows"]) for p in data["processes"]] == [
        ("gpu-a", 1, 3), ("gpu-a", 2, 2), ("gpu-b", 1, 1)][:n]


# --- 5. one AttachRequest builder, every flag kept -----------------------------------------------------------

def test_attach_request_maps_every_flag() -> None:
    req = attach.attach_request(7, 3.0, sample_hz=200, kernel_stacks=True, python="on", native_python=True,
                                gpu="off", mode="sampled", gpu_activity="off", trace=False)
    assert req == pb.AttachRequest(pid=7, duration_s=3.0, sample_hz=200, kernel_stacks=True, python=pb.PYTHON_ON,
                                   native_python=True, gpu=pb.GPU_OFF, mode=pb.MODE_SAMPLED,
                                   gpu_activity=pb.GPU_ACTIVITY_OFF)
    assert attach.attach_request(7, 3.0, gpu_activity="off", trace=True).gpu_activity == pb.GPU_ACTIVITY_ON
    assert attach.attach_request(7, 3.0) == pb.AttachRequest(pid=7, duration_s=3.0, python=pb.PYTHON_AUTO,
                                                              gpu=pb.GPU_AUTO, mode=pb.MODE_EXACT)


@pytest.mark.parametrize(("argv", "expected"), [
    (["attach", "4242", "--duration", "3", "--rate", "200", "--kernel-stacks", "--python", "on", "--native-python",
      "--no-gpu", "--no-gpu-activity", "--mode", "sampled", "--quiet"],
     pb.AttachRequest(pid=4242, duration_s=3.0, sample_hz=200, kernel_stacks=True, python=pb.PYTHON_ON,
                      native_python=True, gpu=pb.GPU_OFF, mode=pb.MODE_SAMPLED, gpu_activity=pb.GPU_ACTIVITY_OFF)),
    (["attach", "4242", "--gpu", "--trace", "--no-gpu-activity", "--quiet", "-o", "{tmp}/t.json"],
     pb.AttachRequest(pid=4242, duration_s=10.0, gpu=pb.GPU_ON, mode=pb.MODE_EXACT,
                      gpu_activity=pb.GPU_ACTIVITY_ON, trace=True)),
    (["attach", "4242", "--quiet"], pb.AttachRequest(pid=4242, duration_s=10.0, mode=pb.MODE_SAMPLED)),
    (["run", "--quiet", "--agent", __file__, "--format", "json", "-o", "{tmp}/p.json", "--", sys.executable, "-c", AGENT],
     pb.AttachRequest(pid=0, duration_s=60.0, gpu=pb.GPU_ON, mode=pb.MODE_SAMPLED, gpu_activity=pb.GPU_ACTIVITY_ON)),
    (["analyze", "4242", "--duration", "2", "--rate", "50", "--quiet"],
     pb.AttachRequest(pid=4242, duration_s=2.0, sample_hz=50, mode=pb.MODE_EXACT)),
    (["report", "--pid", "4242", "--duration", "4", "--no-findings"],
     pb.AttachRequest(pid=4242, duration_s=4.0, mode=pb.MODE_EXACT)),
    (["run", "--rate", "300", "--python", "off", "--mode", "sampled", "--trace", "--quiet", "--agent", __file__,
      "--format", "json", "-o", "{tmp}/t.json", "--", sys.executable, "-c", AGENT],
     pb.AttachRequest(pid=0, duration_s=60.0, sample_hz=300, python=pb.PYTHON_OFF, gpu=pb.GPU_ON,
                      mode=pb.MODE_SAMPLED, gpu_activity=pb.GPU_ACTIVITY_ON, trace=True)),
])
def test_every_capture_builds_its_request_in_one_place(argv: list[str], expected: pb.AttachRequest,
                                                       daemon: FakeDaemon, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    built: list[pb.AttachRequest] = []

    def spy(*a: Any, **kw: Any) -> pb.AttachRequest:
        built.append(real(*a, **kw))
        return built[-1]

    real = attach.attach_request
    monkeypatch.setattr(attach, "attach_request", spy)  # analyze and report import it when they capture
    monkeypatch.setattr(run, "attach_request", spy)
    assert main([a.format(tmp=tmp_path) for a in argv]) == 0
    assert len(daemon.requests) == 1 and built == daemon.requests
    req = daemon.requests[0]
    if argv[0] == "run":
        assert req.pid > 0
        req.pid = 0
    assert req == expected


def test_run_refuses_a_negative_rate_before_it_starts_the_command(daemon: FakeDaemon, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    assert main(["run", "--rate", "-5", "--agent", __file__, "--", "touch", str(marker)]) == 2
    assert "--rate must be a positive number" in capsys.readouterr().err and not marker.exists()


@pytest.mark.parametrize("var", ["CUDA_INJECTION64_PATH", "ROCP_TOOL_LIBRARIES"])
def test_run_refuses_when_another_tool_injects(daemon: FakeDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], var: str) -> None:
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    monkeypatch.delenv("ROCP_TOOL_LIBRARIES", raising=False)
    monkeypatch.setenv(var, "/opt/other/libtool.so")
    marker = tmp_path / "ran"
    assert main(["run", "--agent", __file__, "--", "touch", str(marker)]) == 2
    assert f"{var} is already set (/opt/other/libtool.so)" in capsys.readouterr().err and not marker.exists()


def test_run_names_every_built_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deepctx.host.gpu_agents import injection_env

    cupti, rocprof = tmp_path / "libdeepctx_cupti.so", tmp_path / "libdeepctx_rocprof.so"
    cupti.write_bytes(b"")
    rocprof.write_bytes(b"")
    monkeypatch.setenv("DEEPCTX_AGENT", str(cupti))
    monkeypatch.setenv("DEEPCTX_ROCPROF_AGENT", str(rocprof))
    assert injection_env() == {"CUDA_INJECTION64_PATH": str(cupti), "ROCP_TOOL_LIBRARIES": str(rocprof)}
    assert injection_env("/x/flag.so") == {"CUDA_INJECTION64_PATH": "/x/flag.so", "ROCP_TOOL_LIBRARIES": str(rocprof)}
