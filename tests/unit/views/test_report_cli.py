"""deepctx report in the terminal: columns, sorting, focus, views, narrow terminals, no colour, errors."""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

import recorded

from deepctx.cli.main import main

FIXTURE = str(Path(__file__).resolve().parents[2] / "fixtures" / "profiles" / "h200_torch_ops.json.xz")
DOC = recorded.read(FIXTURE)


def report(capsys, *args: str) -> str:
    assert main(["report", *args, "--color", "never"]) == 0
    return capsys.readouterr().out


def test_top_down_by_calls_shows_exact_counts(capsys) -> None:
    out = report(capsys, FIXTURE, "--sort", "calls", "--width", "200")
    lines = out.splitlines()
    t = recorded.totals(DOC)
    assert (f"totals: CPU samples {t['cpu_samples']}, calls {t['calls']}, API time {t['api_time_ns'] / 1e6:.1f} ms, "
            f"bytes {t['bytes'] / 2**20:.0f} MiB, sync wait {t['sync_wait_ns'] / 1e6:.1f} ms") in out
    assert "top-down, % of total calls" in out
    _, k = recorded.elementwise(DOC)
    assert (k["grid"], k["block"]) == ([1, 1, 1], [128, 1, 1])
    # The mangled name is longer than the column: it is cut, its kind tag and launch geometry stay.
    kernel = next(line for line in lines if k["name"][:16] in line and "[kernel]" in line)
    assert kernel.split()[:3] == [f"{100 * 1000 / t['calls']:.1f}%", "1000", "1000"] == ["83.3%", "1000", "1000"]
    assert kernel.endswith("…  [kernel]  grid 1x1x1 block 128x1x1")
    thread = next(line for line in lines if f"[thread] python3 ({DOC['pid']})" in line)
    assert thread.split()[:2] == ["100.0%", str(t["calls"])]


def test_flat_view_is_sorted_by_self(capsys) -> None:
    out = report(capsys, FIXTURE, "--view", "flat", "--sort", "calls", "--columns", "calls", "--width", "120")
    rows = [line for line in out.splitlines() if line.strip().endswith("]") and "%" in line]
    assert [r.split()[1] for r in rows[:4]] == ["1000", "50", "50", "50"]
    _, k = recorded.elementwise(DOC)
    frame = rows[0].split(None, 3)[3]
    assert frame.endswith("…  [kernel]")  # the name is cut, its kind tag stays
    shown = frame.removesuffix("…  [kernel]")
    assert len(shown) >= 16 and k["name"].startswith(shown)


def test_bottom_up_focus_shows_callers(capsys) -> None:
    out = report(capsys, FIXTURE, "--view", "bottom-up", "--focus", "^cudaLaunchKernel$", "--sort", "calls",
                 "--width", "160", "--min-percent", "0")
    assert "bottom-up (callers of ^cudaLaunchKernel$), % of total calls" in out
    assert "totals: CPU samples 1, calls 1071" in out
    first = next(line for line in out.splitlines() if "cudaLaunchKernel  [api]" in line)
    assert first.split()[:2] == ["100.0%", "1071"]


def test_narrow_terminal_drops_columns_and_says_so(capsys) -> None:
    out = report(capsys, FIXTURE, "--sort", "calls", "--width", "60")
    assert max(len(line) for line in out.splitlines()) <= 60
    flat = " ".join(out.split())
    assert "CPU samples, API time, bytes, sync wait not shown: the terminal is 60 columns wide" in flat
    assert "83.3%" in out  # the sort metric always stays


def test_no_colour_output_has_no_escape_codes_and_keeps_kind_tags(capsys) -> None:
    out = report(capsys, FIXTURE, "--sort", "calls", "--width", "150")
    assert "\x1b[" not in out
    assert "[api]" in out and "[kernel]" in out and "kinds:" not in out  # no legend without colour


def test_colour_output_colours_kinds(capsys) -> None:
    assert main(["report", FIXTURE, "--sort", "calls", "--width", "150", "--color", "always"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" in out and "kinds:" in out


def test_depth_limit_and_deep_paths(capsys) -> None:
    out = report(capsys, FIXTURE, "--sort", "calls", "--width", "200", "--depth", "2", "--min-percent", "0")
    assert "deeper than 2 hidden" in out and "[kernel stub" not in out


def test_ascii_guides_when_the_terminal_is_not_utf8(capsys, monkeypatch) -> None:
    import io

    from rich.console import Console

    from deepctx.cli.formats.terminal import ViewOptions
    from deepctx.cli.formats.tree_table import TreeTable
    from deepctx.cli.views.document import load
    from deepctx.profiles.tree import from_doc

    buf = io.StringIO()
    con = Console(file=buf, width=150, color_system=None, legacy_windows=False)
    monkeypatch.setattr(Console, "encoding", property(lambda self: "ascii"))
    doc = load(FIXTURE)
    TreeTable("top-down").render(doc, from_doc(doc), ViewOptions(metric="calls", columns=["calls"]), con)
    text = buf.getvalue()
    assert "`-" in text and "└" not in text and "µs" not in text


def test_unknown_metric_and_bad_files_fail_with_one_line(tmp_path, capsys) -> None:
    assert main(["report", FIXTURE, "--sort", "nope"]) == 2
    assert "--sort nope: the profile has no such metric" in capsys.readouterr().err
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema": "other"}))
    assert main(["report", str(bad)]) == 2
    assert "not a deepctx profile" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["report", FIXTURE, "--focus", "no_such_frame_anywhere"]) == 1
    assert "no frame matches" in capsys.readouterr().err


def test_plain_gzip_and_xz_json_read_the_same(tmp_path, capsys) -> None:
    plain, gz = tmp_path / "p.json", tmp_path / "p.json.gz"
    plain.write_bytes(lzma.decompress(Path(FIXTURE).read_bytes()))  # the fixture is xz
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    a = report(capsys, FIXTURE, "--width", "150")
    assert report(capsys, str(plain), "--width", "150") == a
    assert report(capsys, str(gz), "--width", "150") == a


def test_html_option_writes_a_report(tmp_path, capsys) -> None:
    out = tmp_path / "r.html"
    assert main(["report", FIXTURE, "--html", str(out)]) == 0
    assert out.stat().st_size > 50_000 and "report written to" in capsys.readouterr().err


def test_pid_without_a_daemon_says_so(tmp_path, capsys) -> None:
    assert main(["--socket", str(tmp_path / "none.sock"), "report", "--pid", "1"]) == 3
    assert "deepctxd is not running" in capsys.readouterr().err


def test_a_profile_with_gpu_time_opens_on_gpu_time(capsys, tmp_path: Path) -> None:
    """report sorts and takes percentages of GPU time where the profile has any (#34.9), as `profile` does."""
    from synth import gpu_profile

    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(gpu_profile(str(tmp_path / "train.py"))))
    out = report(capsys, str(path), "--width", "160")
    assert "top-down, % of total GPU time" in out
    multiply = next(line for line in out.splitlines() if "multiply" in line)  # its kernel: 2 of 2.075 ms
    assert multiply.split()[:2] == [f"{100 * 1000 * 2000 / (1000 * 2000 + 50 * 1500):.1f}%", "2.00"] == ["96.4%", "2.00"]
    assert "top-down, % of total CPU samples" in report(capsys, str(path), "--sort", "cpu_samples", "--width", "160")


def test_metric_names_from_the_profile_are_escaped(capsys, tmp_path) -> None:
    # a PC-sampled capture's stall_* metrics are named by the CUPTI agent, inside the target
    name = "stall_[bold]x\x1b]0;owned\x07"
    doc = json.loads(json.dumps(DOC))
    doc["metrics"].append(name)
    doc["root"]["metrics"][name] = 7
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    shown = "stall_[bold]x\\x1b]0;owned\\x07"
    wide = report(capsys, str(path), "--sort", "calls", "--width", "300", "--columns", f"calls,{name}")
    narrow = report(capsys, str(path), "--sort", "calls", "--width", "60", "--columns", f"calls,{name}")
    assert "\x1b" not in wide + narrow and "\x07" not in wide + narrow
    assert f"{shown} 7" in wide and "stall_[b…" in wide  # the totals; a column header, not markup
    assert f"({shown} not shown: the terminal is 60" in narrow


def test_a_broken_xz_file_is_named_in_one_line(tmp_path, capsys) -> None:
    broken = tmp_path / "p.json.xz"
    broken.write_bytes(Path(FIXTURE).read_bytes()[:4000])  # cut short
    assert main(["report", str(broken)]) != 0
    err = capsys.readouterr().err
    assert f"{broken}: not a valid xz file" in err and err.count("\n") == 1
