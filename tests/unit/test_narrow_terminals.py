"""Every terminal view at 80 and 120 columns and on a pipe (#34.2): no row wider than the terminal, no word
wrapped in two, frames keep their function, file and line (paths shorten instead), ps and status keep PID
and command; output that is not a terminal is not cut at all."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from deepctx.cli.commands import attach, ps, status, top
from deepctx.cli.formats.terminal import frame_text, path_forms
from deepctx.cli.main import main
from deepctx.proto.v1 import deepctx_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_grpc import Unary  # noqa: E402
from test_cli_commands import profile_message  # noqa: E402

PROFILES = Path(__file__).resolve().parents[1] / "fixtures" / "profiles"
RESNET = str(PROFILES / "h200_resnet50_trace.json.xz")
LAUNCH_LOOP = str(PROFILES / "analyzer" / "analyzer_launch_bound_loop_inefficient.json.xz")
TORCH_FILE = "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py"
HOST_CACHE_TOTALS = {"host_cache_entries": 12, "host_cache_bytes": 3_500_000, "host_cache_budget_bytes": 64 << 20,
                     "host_cache_hits": 40, "host_cache_misses": 12, "host_cache_builds": 12,
                     "host_cache_evictions": 0, "host_cache_builds_unwind": 7}
LONG_COMMAND = ("/opt/torch/.venv/bin/python3 -m torch.distributed.run --nproc-per-node 8 train.py "
                "--config configs/gpt2.yaml")


class FakeDaemon:
    def __init__(self) -> None:
        self.Top = Unary(self.top)  # noqa: N815 (gRPC's name); top queries with Top.future

    def ListProcesses(self, req: pb.ListProcessesRequest) -> pb.ListProcessesReply:  # noqa: N802 (gRPC's name)
        return pb.ListProcessesReply(processes=[
            pb.ProcessEntry(pid=1234567, user="alice", command=LONG_COMMAND, python_version="3.12.3",
                           gpu_libraries=["libcudart.so.13", "libcuda.so.1", "libnccl.so.2"], profiled=True),
            pb.ProcessEntry(pid=77, user="root", command="python3 x.py")])

    def Status(self, req: pb.StatusRequest) -> pb.StatusReply:  # noqa: N802
        return pb.StatusReply(version="0.4.0", daemon_pid=812, uptime_s=3600, kernel="6.18.0-1-cloud-amd64",
                              socket="/run/deepctx/deepctxd.sock", default_sample_hz=99, max_sample_hz=1000,
                              max_duration_s=3600, totals={"captures_served": 3, **HOST_CACHE_TOTALS},
                              sessions=[pb.Session(
                                  id=7, pid=4242, command=LONG_COMMAND, started_unix=time.time() - 5,
                                  duration_s=10.0, sample_hz=99, probes=["cpu", "python", "gpu", "device"],
                                  stats={"cpu_samples": 500, "cpu_user_stacks_lost": 3}, state="capturing")])

    def top(self, req: pb.TopRequest) -> pb.TopReply:
        r = pb.TopReply(since_unix=1_796_000_000.0, until_unix=1_796_000_300.0, windows=3, sort="gpu_time_ns",
                        kernel_sort="gpu_time_ns")
        p = r.processes.add(host="h1", pid=1234567, command=LONG_COMMAND, windows=3)
        p.metrics["gpu_time_ns"] = 2_500_000_000
        k = r.kernels.add(name="void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                               "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
                          processes=1)
        k.metrics["gpu_time_ns"] = 2_000_000_000
        ln = r.lines.add(file=TORCH_FILE, line=1786, function="Module._call_impl")
        ln.metrics["gpu_time_ns"] = 1_500_000_000
        return r

    def Attach(self, req: pb.AttachRequest) -> Any:  # noqa: N802
        yield pb.AttachEvent(profile=profile_message(req.pid))


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> FakeDaemon:
    d = FakeDaemon()
    for mod in (attach, ps, status, top):
        monkeypatch.setattr(mod, "connect", lambda *a, **k: d)
    return d


def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int | None,
        *argv: str) -> str:
    """The command's stdout at `columns` (COLUMNS, as a terminal of that width sets it), or, with None, as
    on a pipe (pytest's stdout is not a terminal)."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["--socket", "/nonexistent", *argv]) == 0
    return capsys.readouterr().out


def widest(text: str) -> int:
    return max(cell_len(line.rstrip()) for line in text.splitlines())


def words(text: str) -> set[str]:
    return set(text.split())


def cut_words(narrow: str, piped: str) -> set[str]:
    """Words of the narrow output that are not words of the piped one: a word wrapped in two leaves a piece
    that is neither. A shortened path is the end of the whole one; a shortened name holds an ellipsis; the
    footer's lines say what the narrow terminal hid."""
    whole = words(piped)
    body = re.sub(r"^\([^()]*\)\s*$", "", narrow, flags=re.M)  # notes of what the narrow terminal hid
    return {w for w in words(body) if "…" not in w and w not in whole and not re.match(r"\[\d+\]", w)
            and not any(p.endswith(w) or p.startswith(w) for p in whole)}


@pytest.mark.parametrize("columns", [80, 120])
def test_report_fits_and_keeps_file_and_line(columns: int, capsys, monkeypatch) -> None:
    out = run(capsys, monkeypatch, columns, "report", RESNET, "--color", "never", "--depth", "12")
    assert widest(out) <= columns
    piped = run(capsys, monkeypatch, None, "report", RESNET, "--color", "never", "--depth", "12")
    assert cut_words(out, piped) == set()  # no word cut in two
    # every Python frame keeps its function and file:line; the path shortened to fit
    rows = [ln for ln in out.splitlines() if re.search(r"\.py:\d+", ln)]
    assert len(rows) >= 20
    step = next(ln for ln in out.splitlines() if "─step  " in ln)
    assert step.rstrip().endswith("resnet.py:12")
    # start-up frames are folded: one <module> below the thread, with both stacks' GPU time
    module = [ln for ln in out.splitlines() if "─<module>  " in ln and ":21" in ln]
    assert len(module) == 1 and module[0].split()[:2] == ["100.0%", "50.1"]


def test_report_on_a_pipe_is_not_cut(capsys, monkeypatch) -> None:
    out = run(capsys, monkeypatch, None, "report", RESNET, "--color", "never", "--depth", "12")
    assert ("folded: start-up frames above 1 Python path (--show-startup), 158 plumbing frames (--show-plumbing)"
            in out)
    assert widest(out) > 120  # nothing narrowed it
    assert "/tmp/pytest-of-root/pytest-0/device-targets0/resnet.py:12" in out  # the path as recorded
    assert not any("…" in ln for ln in out.splitlines() if ".py:" in ln)
    assert "CPU samples, calls" not in out  # every metric column is there: none said to be hidden


@pytest.mark.parametrize("columns", [80, 120])
def test_flat_view_and_findings_fit(columns: int, capsys, monkeypatch) -> None:
    out = run(capsys, monkeypatch, columns, "report", LAUNCH_LOOP, "--color", "never", "--view", "flat")
    piped = run(capsys, monkeypatch, None, "report", LAUNCH_LOOP, "--color", "never", "--view", "flat")
    table = out[:out.index("\nfindings")]
    assert widest(table) <= columns
    findings, piped_findings = out[out.index("\nfindings"):], piped[piped.index("\nfindings"):]
    assert words(findings) <= words(piped_findings)  # findings wrap between words only
    path = "/work/main/.snap/examples/inefficiencies/launch_bound_loop.py"  # said where the line has room for it
    assert (path in findings) is (columns == 120) and path in piped_findings
    step = next(ln for ln in out.splitlines() if "main.<locals>.step" in ln or "main.<…>.step" in ln)
    assert step.rstrip().endswith("launch_bound_loop.py:20") or "launch_bound_loop.py:20 " in step


@pytest.mark.parametrize("columns", [80, 120])
def test_attach_tree_fits(columns: int, daemon, capsys, monkeypatch) -> None:
    out = run(capsys, monkeypatch, columns, "attach", "4242", "--duration", "1", "--quiet")
    assert widest(out) <= columns
    assert re.search(r"^ 30\.0%\s+30\s+30\s.*└─load  data\.py:3\s*$", out, re.M), out
    assert re.search(r"^ 70\.0%\s+70\s.*├─step  train\.py:12\s*$", out, re.M), out


@pytest.mark.parametrize("columns", [80, 120, None])
def test_ps_keeps_pid_user_python_and_command(columns: int | None, daemon, capsys, monkeypatch) -> None:
    out = run(capsys, monkeypatch, columns, "ps")
    head, first, second = out.splitlines()[:3]
    assert head.split()[:3] == ["PID", "USER", "PYTHON"] and head.rstrip().endswith("COMMAND")
    assert first.split()[:4] == ["1234567", "*", "alice", "3.12.3"]
    assert second.split() == ["77", "root", "-", "-", "python3", "x.py"]
    if columns is None:
        assert first.rstrip().endswith(LONG_COMMAND) and "libcudart.so.13, libcuda.so.1, libnccl.so.2" in first
    else:
        assert widest(out) <= columns
        command = first[head.index("COMMAND"):].rstrip()
        assert command.endswith("…") and LONG_COMMAND.startswith(command[:-1]) and len(command) >= 24


@pytest.mark.parametrize("columns", [80, 120, None])
def test_status_keeps_pid_and_command(columns: int | None, daemon, capsys, monkeypatch) -> None:
    out = run(capsys, monkeypatch, columns, "status")
    lines = out.splitlines()
    head = next(ln for ln in lines if ln.startswith("SESSION"))
    row = lines[lines.index(head) + 1]
    assert row.split()[:3] == ["7", "4242", "capturing"]
    assert re.search(r"  [45]/10 s  .*cpu 3  ", row), row
    if columns is None:
        assert row.rstrip().endswith(LONG_COMMAND) and "PROBES" in head
    else:
        assert max(cell_len(ln) for ln in (head, row)) <= columns
        assert row.rstrip().endswith("…") and "/opt/torch/" in row


@pytest.mark.parametrize("columns", [80, None])
def test_status_shows_the_host_cache(columns: int | None, daemon, capsys, monkeypatch) -> None:
    out = run(capsys, monkeypatch, columns, "status")
    lines = out.splitlines()
    at = lines.index("host cache: 12 entries, 3.3 of 64.0 MiB")
    assert lines[at + 1] == "  40 hits, 12 misses, 12 builds, 0 evictions"
    assert "totals: captures_served 3" in lines and "host_cache_" not in out  # said once, in its own lines
    if columns is not None:
        assert widest(out) <= columns
    doc = json.loads(run(capsys, monkeypatch, None, "status", "--format", "json"))
    # int64 map values come as strings: every counter the daemon sent, under its own key
    assert {k: int(v) for k, v in doc["totals"].items() if k.startswith("host_cache_")} == HOST_CACHE_TOTALS


@pytest.mark.parametrize("columns", [80, 120])
def test_top_keeps_pid_and_the_line(columns: int, daemon, capsys, monkeypatch) -> None:
    out = run(capsys, monkeypatch, columns, "top", "--once")
    assert widest(out) <= columns
    assert ("(CONTAINER not shown at 80 columns)" in out) is (columns == 80)
    proc = next(ln for ln in out.splitlines() if "1234567" in ln)
    assert proc.split()[:3] == ["1234567", "2.50", "s"]
    line = next(ln for ln in out.splitlines() if "Module._call_impl" in ln)
    assert line.rstrip().endswith("modules/module.py:1786") or line.rstrip().endswith("module.py:1786")
    kernel = next(ln for ln in out.splitlines() if "elementwise_kernel<…>" in ln)  # template arguments give way
    assert kernel.split()[:3] == ["0", "2.00", "s"] and "(" not in kernel  # and the argument list before them
    assert cut_words(out, run(capsys, monkeypatch, None, "top", "--once")) == set()


def test_paths_shorten_from_the_middle_down_to_the_basename() -> None:
    forms = path_forms(TORCH_FILE, cwd="/work")
    assert forms[0] == TORCH_FILE and forms[-1] == "module.py"
    assert "/opt/…/torch/nn/modules/module.py" in forms and "…/nn/modules/module.py" in forms
    assert [len(f) for f in forms] == sorted((len(f) for f in forms), reverse=True)
    assert path_forms("/work/main/train.py", cwd="/work/main") == ["/work/main/train.py", "train.py"]
    from deepctx.profiles.tree import Frame

    for width, shown in ((120, f"Module._call_impl  {TORCH_FILE}:1786"),
                         (80, "Module._call_impl  …/python3.12/site-packages/torch/nn/modules/module.py:1786"),
                         (50, "Module._call_impl  /opt/…/modules/module.py:1786"),
                         (33, "Module._call_impl  module.py:1786"),
                         (30, "Modu…call_impl  module.py:1786")):  # the name gives way last
        assert frame_text(Frame("python", "Module._call_impl", TORCH_FILE, 1786), width=width).plain == shown


def test_fleet_top_keeps_host_and_pid(daemon) -> None:
    """`deepctx fleet top` is top's table with a HOST column first: kept whole, as PID is."""
    import io

    from rich.console import Console

    from deepctx.cli.commands.top import from_reply
    from deepctx.cli.formats.top_table import renderable

    data = from_reply(daemon.Top(pb.TopRequest(since_unix=1_796_000_000.0)))
    data["processes"][0]["host"] = "gpu-node-17.example.org"
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None)
    console.print(renderable(data, title="deepctx fleet top", show_host=True, width=80))
    text = out.getvalue()
    assert widest(text) <= 80
    row = next(ln for ln in text.splitlines() if "1234567" in ln)
    assert row.split()[:4] == ["gpu-node-17.example.org", "1234567", "2.50", "s"] and row.rstrip().endswith("…")


@pytest.mark.parametrize("columns", [80, 120])
def test_diff_tables_keep_their_numbers(columns: int, capsys, monkeypatch) -> None:
    out = run(capsys, monkeypatch, columns, "diff", LAUNCH_LOOP, FIXED, "--color", "never", "--limit", "6")
    kernels = out[out.index("GPU activity by kernel"):out.index("\nfunctions by")]
    assert widest(kernels) <= columns
    rows = [ln.split()[:6] for ln in kernels.splitlines() if ln.startswith(("grew", "appeared"))]
    # the graph's name whole at 80 too: a kernel's '[kernel]' tag repeats the column's title
    assert rows == [["grew", "50000", "0", "46.5", "ms", "55.7"], ["grew", "500", "0", "374", "µs", "502"],
                    ["appeared", "0", "500", "0", "[graph", "0x34420420]"]]
    assert [ln.split()[-1] for ln in kernels.splitlines() if ln.startswith("grew")][1:] == ["[memcpy]"]
    functions = out[out.index("\nfunctions by"):]
    step = next(ln for ln in functions.splitlines() if ln.startswith("vanished"))
    # at 80 the noise columns give way to the function and its file (a caption says so), at 120 both fit
    numbers = ["vanished", "95.73", "0.00", "-95.73"] + (["6.66", "-50.0"] if columns == 120 else [])
    assert step.split()[:-2] == numbers
    captions = [ln.rstrip() for ln in functions.splitlines()]
    assert ("(± noise, z not shown at 80 columns)" in captions) is (columns == 80)


FIXED = str(PROFILES / "analyzer" / "analyzer_launch_bound_loop_fixed.json.xz")
# --by: the two significant rows' function and where, at 80 and 120 columns and on a pipe (None)
STEP_FILE = "/work/main/.snap/examples/inefficiencies/launch_bound_loop.py"
REPLAY_FILE = "/opt/torch/.venv/lib/python3.12/site-packages/torch/cuda/graphs.py"
DIFF_ROWS = {
    ("function", 80): ("main.<locals>.step  launch_bound_loop.py", "CUDAGraph.replay  …/torch/cuda/graphs.py"),
    ("function", 120): ("main.<locals>.step  …/examples/inefficiencies/launch_bound_loop.py",
                        "CUDAGraph.replay  /opt/…/python3.12/site-packages/torch/cuda/graphs.py"),
    ("function", None): (f"main.<locals>.step  {STEP_FILE}", f"CUDAGraph.replay  {REPLAY_FILE}"),
    ("line", 80): ("main.<locals>.step  launch_bound_loop.py:20", "CUDAGraph.replay  …/torch/cuda/graphs.py:139"),
    ("line", 120): ("main.<locals>.step  …/examples/inefficiencies/launch_bound_loop.py:20",
                    "CUDAGraph.replay  …/python3.12/site-packages/torch/cuda/graphs.py:139"),
    ("line", None): (f"main.<locals>.step  {STEP_FILE}:20", f"CUDAGraph.replay  {REPLAY_FILE}:139"),
}


@pytest.mark.parametrize(("by", "columns"), list(DIFF_ROWS))
def test_diff_rows_keep_function_file_and_line(by: str, columns: int | None, capsys, monkeypatch, tmp_path) -> None:
    """The name whole beside its file and line: the path shortens, never the function (#34.2)."""
    monkeypatch.chdir(tmp_path)  # paths under the working directory print relative: the recording's stay absolute
    argv = ("diff", LAUNCH_LOOP, FIXED, "--color", "never", "--by", by, "--limit", "6")
    out = run(capsys, monkeypatch, columns, *argv)
    piped = run(capsys, monkeypatch, None, *argv)
    if columns is not None:
        assert widest(out) <= columns
    assert cut_words(out, piped) == set()
    table = out[out.index(f"\n{by}s by self"):].splitlines()
    rows = {ln.split()[0]: ln.rstrip() for ln in table if ln.startswith(("vanished", "appeared"))}
    step, replay = DIFF_ROWS[(by, columns)]
    assert rows["vanished"].endswith(f" {step}") and rows["appeared"].endswith(f" {replay}")


@pytest.mark.parametrize("columns", [80, 120, None])
def test_diff_call_paths_cut_no_frame(columns: int | None, capsys, monkeypatch) -> None:
    """--by path: the innermost frame whole, callers while they fit, then how many more; nothing cut mid-word."""
    argv = ("diff", LAUNCH_LOOP, FIXED, "--color", "never", "--by", "path", "--limit", "6", "--show-noise")
    out = run(capsys, monkeypatch, columns, *argv)
    piped = run(capsys, monkeypatch, None, *argv)
    if columns is not None:
        assert widest(out) <= columns
    # '[18 more]': how many callers a width leaves out differs by width
    assert {w for w in cut_words(out, piped) if not re.fullmatch(r"\[\d+", w)} == set()
    table = out[out.index("\ncall paths by self"):].splitlines()
    launch = next(ln.rstrip() for ln in table if ln.startswith("vanished"))
    path = launch.split(" -5.1 ", 1)[1]
    assert path == {80: "cudaLaunchKernel ← [18 more]",
                    120: "cudaLaunchKernel ← void at::nati…:gpu_kernel_impl_nocast<…> ← [17 more]",
                    None: "cudaLaunchKernel ← void at::native::gpu_kernel_impl_nocast<at::native::AUnaryFunctor"
                          "<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::"
                          "TensorIteratorBase&, at::native::AUnaryFunctor<float, float, float, at::native::"
                          "binary_internal::MulFunctor<float> > const&) ← at::native::mul_kernel_cuda(at::TensorIteratorBase&)"
                          " ← at::(anonymous namespace)::wrapper_CUDA_mul_Tensor(at::Tensor const&, at::Tensor "
                          "const&) ← [15 more]"}[columns]
