"""`deepctx report FILE --view kernel-lines` on a constructed PC-sampling profile
(tests/fixtures/profiles/pcs_constructed.json: the recorded cubin's kernels, samples of
tests/fixtures/cubin/pcs_samples.json, saxpy launched from two lines), at 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from deepctx.cli.formats.kernel_lines import KernelLinesText
from deepctx.cli.views.kernel_lines import kernel_lines

DOC = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "profiles" / "pcs_constructed.json").read_text())


def render(kernel: str | None = None) -> list[str]:
    console = Console(width=80, record=True, color_system=None, force_terminal=False)
    KernelLinesText().render(DOC, console, kernel)
    return console.export_text().splitlines()


def test_kernels_lines_and_instructions_with_their_stalls() -> None:
    assert render() == [
        "per kernel: hot lines, their SASS; PC samples, % of the kernel's, top stalls",
        "",
        "saxpy  50 PC samples, launched from 2 call paths",
        "  pcs_kernels.cu:12                   50  100.0%  long_scoreboard 40, selected …",
        "    0x0100  FFMA R7, R2, UR6, R7      44   88.0%  long_scoreboard 40, selected 4",
        "    0x00d0  LDG.E R2, desc[UR4]…       6   12.0%  selected 6",
        "",
        "strided_copy  39 PC samples",
        "  pcs_kernels.cu:6                    39  100.0%  long_scoreboard 30, lg_thrott…",
        "    0x0250  STG.E desc[UR4][R4.…      30   76.9%  long_scoreboard 30",
        "    0x0230  LDG.E R3, desc[UR4]…       7   17.9%  lg_throttle 7",
        "    0x00e0  MUFU.RCP R4, R4            2    5.1%  mio_throttle 2",
    ]
    assert max(len(line) for line in render()) <= 80


def test_kernel_regex_and_sums_over_launch_sites() -> None:
    (k,) = kernel_lines(DOC, "^sax")
    assert (k.name, k.samples, k.sites) == ("saxpy", 50, 2)
    (line,) = k.hot_lines()
    assert (line.line.file or "").endswith("pcs_kernels.cu") and line.line.line == 12
    assert dict(line.line.stalls) == {"long_scoreboard": 40, "selected": 10}
    assert " ".join(render("gemm")) == ("no PC samples in this profile for kernels matching 'gemm' (capture with "
                                        "`deepctx run --pc-sampling`)")


def test_the_hatchet_export_carries_the_new_levels() -> None:
    from deepctx.cli.formats.hatchet import HatchetLiteral
    from deepctx.profiles.exporter import ExportOptions

    found = []
    stack = json.loads(HatchetLiteral().export(DOC, ExportOptions()))
    while stack:
        n = stack.pop()
        if n["frame"]["type"] == "gpu_instruction" and n["frame"]["name"].startswith("0x0250"):
            found.append((n["frame"]["line"], n["metrics"]["pc_samples"], n["metrics"]["stall_long_scoreboard (inc)"]))
        stack += n["children"]
    assert found == [(6, 30, 30)]


def test_stall_reasons_from_the_agent_are_escaped() -> None:
    # the agent runs inside the target and names the stall reasons: a name may carry escape sequences
    doc = json.loads(json.dumps(DOC).replace('"stall_selected"', '"stall_sel\\u001b]0;x\\u0007"'))
    console = Console(width=200, record=True, color_system=None, force_terminal=False)
    KernelLinesText().render(doc, console, "^sax")
    out = console.export_text()
    assert "\x1b" not in out and "\x07" not in out
    assert "sel\\x1b]0;x\\x07 4" in out


def test_limit_is_the_lines_per_kernel_and_50_is_honoured(tmp_path: Path, capsys) -> None:
    # strided_copy gets seven hot lines: the default shows 5 and says so; any --limit given, 50 too, is kept
    from deepctx.cli.main import main

    doc = json.loads(json.dumps(DOC))
    stack = [doc["root"]]
    while stack:
        n = stack.pop()
        if n["kind"] == "gpu_function" and n["name"] == "strided_copy":
            (line,) = n["children"]
            n["children"] = [{**json.loads(json.dumps(line)), "name": f"pcs_kernels.cu:{i}", "line": i}
                             for i in range(1, 8)]
        stack += n.get("children", [])
    path = tmp_path / "seven.json"
    path.write_text(json.dumps(doc))

    def shown(*argv: str) -> list[str]:
        assert main(["report", str(path), "--view", "kernel-lines", "--focus", "strided", *argv]) == 0
        out = capsys.readouterr().out
        return [w for w in out.split() if w.startswith("pcs_kernels.cu:")]

    assert shown() == [f"pcs_kernels.cu:{i}" for i in range(1, 6)]
    assert shown("--limit", "50") == [f"pcs_kernels.cu:{i}" for i in range(1, 8)]
    assert shown("--limit", "2") == ["pcs_kernels.cu:1", "pcs_kernels.cu:2"]
