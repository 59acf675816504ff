"""deepctx diff separates change from sampling noise (issue 35.4): profiles drawn from a seeded sampling model of one
steady program show no significant change, a planted 10% slowdown of one function is found and ranked first, and two
different programs get a warning."""

from __future__ import annotations

import json
import os
import random
import tempfile
from collections import Counter

from synth import Builder, frame, nat, py, thread

from deepctx.cli.main import main
from deepctx.cli.views.diff_significance import compare, different_programs, program_of, rollup, significance
from deepctx.profiles.tree import Frame, from_doc

APP = "/srv/app/pipeline.py"
# 40 functions with steady shares of the CPU: a few heavy ones and a long tail
WEIGHTS = {f"stage_{i:02d}": w for i, w in enumerate([30, 22, 15, 12, 10, 8, 7, 6, 5, 5] + [2] * 10 + [1] * 20)}
SAMPLES = 80_000  # a 10% slowdown of a 9% function is then about 5 standard errors


def capture(seed: int, slower: str | None = None, factor: float = 1.10, command: str = "python pipeline.py") -> dict:
    """A profile as the sampler would record it: SAMPLES draws of where the program was, from weights that are the
    program's time per function (slower: that function takes `factor` times as long). Each function runs a few lines,
    and some samples land in an unnamed libc address below it."""
    rng = random.Random(seed)
    weights = {f: w * (factor if f == slower else 1.0) for f, w in WEIGHTS.items()}
    drawn = Counter(rng.choices(list(weights), list(weights.values()), k=SAMPLES))
    b = Builder(command=command)
    for i, (name, n) in enumerate(sorted(drawn.items())):
        at = [thread("python3", 4242), py("<module>", APP, 1), py("main", APP, 5), py(name, APP, 100 + 10 * i)]
        lines = Counter(rng.choices([0, 1, 2], [5, 3, 2], k=n))
        libc = lines.pop(2, 0)
        for off, k in lines.items():
            b.add(at[:-1] + [py(name, APP, 100 + 10 * i + off)], cpu_samples=k)
        b.add(at + [nat("libc.so.6+0x9d2f0", "libc.so.6")], cpu_samples=libc)
    return b.doc


def test_one_steady_program_shows_no_significant_change() -> None:
    for seed in range(1, 6):
        for by in ("function", "line", "path"):
            cmp, warning = significance(capture(seed), capture(100 + seed), "cpu_samples", by)
            assert warning is None
            assert cmp.significant == [], (seed, by, [(c.key[-1].name, c.z) for c in cmp.significant])
            assert cmp.within_noise > 0 and cmp.total_before == cmp.total_after == SAMPLES
            assert cmp.critical_z is not None and 3.0 < cmp.critical_z < 4.5


def test_a_ten_percent_slowdown_of_one_function_is_found_first() -> None:
    for seed in range(1, 6):
        cmp, _ = significance(capture(seed), capture(100 + seed, slower="stage_02"), "cpu_samples")
        first = cmp.changes[0]
        assert (first.key, first.status, first.significant) == (
            (Frame("python", "stage_02", APP, None, None),), "grew", True)
        # 15 of 160 weight units grew to 16.5: a share of 9.38% becomes 10.22% (0.84 points)
        assert sum(WEIGHTS.values()) == 160 and abs(first.delta - (16.5 / 161.5 - 15 / 160)) < first.margin / 2
        assert [c.key[0].name for c in cmp.significant] == ["stage_02"]


def test_shares_normalise_captures_of_other_lengths() -> None:
    before, after = rollup(from_doc(capture(1)), "cpu_samples", "function"), {}
    longer = rollup(from_doc(capture(2)), "cpu_samples", "function")
    after = {k: 3 * v for k, v in longer.items()}  # three times as long, same program
    assert compare(before, after, "cpu_samples", "function").significant == []
    absolute = compare(before, after, "cpu_samples", "function", normalise=False)
    assert len(absolute.significant) == len(before)  # every function "grew" in absolute counts


def test_exact_metrics_have_no_noise_interval() -> None:
    f, g = (Frame("kernel", "gemm"),), (Frame("kernel", "relu"),)
    cmp = compare({f: 10, g: 10}, {f: 12, g: 8}, "calls", "function")
    [c, d] = cmp.changes
    assert (cmp.critical_z, c.se, c.z, c.margin, c.significant, c.status) == (None, None, None, None, True, "grew")
    assert (c.key, c.delta, d.status) == (f, 0.6 - 0.5, "shrank")
    assert compare({f: 10, g: 10}, {f: 20, g: 20}, "calls", "function").significant == []  # same shares


def test_different_programs_get_a_warning() -> None:
    assert program_of("/usr/bin/python3 -u /srv/app/pipeline.py --epochs 3") == "pipeline.py"
    assert program_of("python -m torch.distributed.run train.py") == "torch.distributed.run"
    assert program_of("/opt/bin/server --port 80") == "server"
    cmp, warning = significance(capture(1), capture(2, command="python other.py"), "cpu_samples")
    assert warning == ("before runs pipeline.py and after runs other.py: these look like different programs, so "
                       "their changes are not a before and after of one program")
    b = {(Frame("python", "a", "x.py"),): 100}
    a = {(Frame("python", "b", "y.py"),): 70, (Frame("python", "a", "x.py"),): 30}
    assert different_programs({"command": "p"}, {"command": "p"}, b, a) == (
        "only 30% of after's total is in rows before also has: these look like different programs (or very different "
        "runs of one)")


def test_diff_command_ranks_the_slowdown_and_counts_the_noise(capsys) -> None:
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        with open(a, "w") as f:
            json.dump(capture(1), f)
        with open(b, "w") as f:
            json.dump(capture(101, slower="stage_02"), f)
        assert main(["diff", a, b, "--color", "never", "--width", "160"]) == 0
        out = capsys.readouterr().out
        assert main(["diff", a, b, "--color", "never", "--width", "160", "--by", "line", "--show-noise"]) == 0
        lines_out = capsys.readouterr().out
    assert "functions by self CPU samples (share of each side's total)" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("grew", "shrank", "appeared", "vanished"))]
    assert [r[0] for r in rows] == ["grew"] and rows[0][-2:] == ["stage_02", APP]
    assert "(1 significant, 39 within sampling noise (--show-noise lists them))" in out
    assert "warning" not in out
    noise = [line for line in lines_out.splitlines() if line.startswith("noise")]
    assert "lines by self CPU samples" in lines_out and len(noise) >= 20


def test_diff_command_on_an_exact_metric_lists_every_change(capsys) -> None:
    docs = []
    for gemms in (100, 150):
        b = Builder()
        at = [thread("python3", 4242), py("step", APP, 7), frame("api", "cudaLaunchKernel", module="libcudart.so")]
        b.add(at + [frame("kernel", "gemm")], calls=gemms)
        b.add(at + [frame("kernel", "relu")], calls=100)
        docs.append(b.doc)
    with tempfile.TemporaryDirectory() as d:
        a, b_ = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        for path, doc in ((a, docs[0]), (b_, docs[1])):
            with open(path, "w") as f:
                json.dump(doc, f)
        assert main(["diff", a, b_, "--sort", "calls", "--color", "never", "--width", "160"]) == 0
        out = capsys.readouterr().out
    assert "calls is counted or timed, not sampled: every change is listed" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("grew", "shrank"))]
    kernels = [r for r in rows if r[-2] in ("gemm", "relu")]
    # function rows: gemm's share 50% -> 60%, relu's 50% -> 40% (the GPU table above lists them by kernel too)
    assert [(r[0], r[1:4], r[-2]) for r in kernels[-2:]] == [
        ("grew", ["50.00", "60.00", "+10.00"], "gemm"), ("shrank", ["50.00", "40.00", "-10.00"], "relu")]
    assert "(2 changed)" in out
