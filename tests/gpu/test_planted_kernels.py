"""PC sampling and its rules on a GPU host (root, the H200): each planted kernel pair of
examples/inefficiencies/kernels/planted.cu (bad and fixed, launched from examples/inefficiencies/<rule>.py)
is timed unprofiled, the bad variant is profiled with `deepctx run --pc-sampling`, and its rule must fire at
the example's marked line naming a source line of planted.cu; the fixed variant must not fire it. The table of
estimated against measured speedup is printed and, with $DEEPCTX_ARTIFACTS, written there
(pc_rules_speedups.md, .json) with every profile (analyzer_<rule>_<variant>.json.xz: the recordings the CPU
tests want, tests/fixtures/profiles/analyzer/). With ncu on PATH, two kernels' stall reasons are set beside
Nsight Compute's (pc_rules_ncu.md).

Everything it writes goes into ONE archive, $DEEPCTX_ARTIFACTS/planted.tgz (else $OUT; the GPU host returns
at most 8 files), packed when the module ends, beside one log, planted.log: per rule and variant the rules'
statuses, the findings, and each sampled kernel's hottest source lines and opcodes with their top stall
reasons (also printed with -s), so that a rule that does not fire says why.

The PC rules' findings are looked for without the 1.02x threshold (Limits(min_speedup=1.0)): the capture is
the whole process (Python's and CUDA's start, T of 0.1 to 0.7 s) around one timed run of milliseconds of
kernels, so the whole-program estimates are near 1.0x whatever the kernel's stalls; the table also gives the
kernel-level estimate (the same removable time over the kernel's GPU time), the like of the measured speedup.

Needs nvcc (CUDA_HOME, default /usr/local/cuda) to build the planted kernels. Environment:
DEEPCTX_PC_RULES=r1,r2 (a subset), DEEPCTX_PC_REPEATS (unprofiled runs per variant, their median counts;
default 5), DEEPCTX_PC_PERIOD (--pc-period; default CUPTI's)."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import DEEPCTX, StdinTarget, line_of, session_of, wait_for

from deepctx.profiles.analyzer import Limits, annotate

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "inefficiencies"
KERNELS = EXAMPLES / "kernels"
AGENT = REPO / "native" / "build" / "libdeepctx_cupti.so"
PC_RULES = ("long-scoreboard", "uncoalesced-access", "bank-conflicts", "warp-divergence", "fp32-fma",
            "low-occupancy")
RULES = [r for r in PC_RULES if r in os.environ.get("DEEPCTX_PC_RULES", ",".join(PC_RULES)).split(",")]
REPEATS = int(os.environ.get("DEEPCTX_PC_REPEATS", "5"))
NCU_KERNELS = {"long-scoreboard": "sum_dependent", "bank-conflicts": "transpose_tiled"}
PC_LIMITS = Limits(min_speedup=1.0)
ARCHIVE, LOG = "planted.tgz", "planted.log"
STAGE: list[Path] = []  # the staging directory of what goes into the archive (set by the `staged` fixture)
STALLS = ("long_scoreboard", "lg_throttle", "mio_throttle", "short_scoreboard", "branch_resolving",
          "math_pipe_throttle", "selected", "wait", "barrier", "not_selected")


def script(rule: str) -> Path:
    return EXAMPLES / (rule.replace("-", "_") + ".py")


def out_dir() -> Path | None:
    out = os.environ.get("DEEPCTX_ARTIFACTS") or os.environ.get("OUT")
    return Path(out) if out else None


def stage(name: str) -> Path:
    """Where a file for the archive is written."""
    return STAGE[-1] / name


def log(text: str) -> None:
    """Printed, and appended to the staged log (copied beside the archive at the end)."""
    print(text, flush=True)
    with stage(LOG).open("a") as f:
        f.write(text + "\n")


@pytest.fixture(scope="module", autouse=True)
def staged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every file the module writes, packed into one archive under $DEEPCTX_ARTIFACTS (else $OUT) when it ends,
    with the log beside it: the GPU host returns at most 8 files."""
    STAGE.append(tmp_path_factory.mktemp("planted_artifacts"))
    stage(LOG).touch()
    yield STAGE[-1]
    out = out_dir()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out / ARCHIVE, "w:gz") as tar:
            for f in sorted(STAGE[-1].iterdir()):
                tar.add(f, arcname=f.name)
        shutil.copyfile(stage(LOG), out / LOG)
    STAGE.pop()


def kernel_stalls(doc: dict[str, Any], top: int = 5) -> list[str]:
    """Each sampled kernel's hottest source lines and opcodes with their top stall reasons (shares of the
    kernel's samples; the *_not_issued subsets left out)."""
    out = []
    stack = [doc["root"]]
    while stack:
        n = stack.pop()
        stack += n["children"]
        if n["kind"] != "kernel" or not n["children"]:
            continue
        lines: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        ops: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for fn in n["children"]:
            for ln in fn["children"]:
                for ins in ln["children"]:
                    parts = [p for p in ins["name"].split()[1:] if not p.startswith("@")]
                    for k, v in ins["metrics"].items():
                        if k.startswith("stall_") and not k.endswith("_not_issued") and v:
                            lines[ln["name"]][k[6:]] += v
                            ops[parts[0] if parts else "?"][k[6:]] += v
        total = sum(sum(d.values()) for d in lines.values())
        if not total:
            continue
        out.append(f"  kernel {n['name'][:70]} calls {n['metrics'].get('calls')} gpu_time_ns "
                   f"{n['metrics'].get('gpu_time_ns')} grid {n.get('grid')} block {n.get('block')} samples {total}")
        for what, table in (("line", lines), ("op", ops)):
            for key, d in sorted(table.items(), key=lambda kv: -sum(kv[1].values()))[:top]:
                reasons = ", ".join(f"{r} {v / total:.3f}" for r, v in sorted(d.items(), key=lambda kv: -kv[1])[:4])
                out.append(f"    {what} {key}: {sum(d.values()) / total:.3f} ({reasons})")
    return out


def diagnose(rule: str, variant: str, doc: dict[str, Any]) -> None:
    """What the next run needs to tell why a rule did or did not fire: the PC rules' statuses, the findings,
    the stall reasons per line."""
    st = doc.get("stats", {})
    log(f"== {rule} {variant}: pc_sampling_samples {st.get('pc_sampling_samples')}, dropped by CUPTI "
        f"{st.get('pc_sampling_samples_dropped_by_cupti')}, messages lost {st.get('pc_sampling_messages_lost')}, "
        f"device {doc.get('device')}, warnings {[w[:160] for w in doc.get('warnings', [])]}")
    for r in doc.get("analysis", {}).get("rules", []):
        if r["rule"] in PC_RULES or r["status"] == "fired":
            log(f"  rule {r['rule']}: {r['status']} {r.get('reason') or ''}")
    for f in doc.get("findings", []):
        ev = f.get("evidence", {})
        log(f"  finding {f['rule']} at {Path(f['location']['file'] or '-').name}:{f['location']['line']} "
            f"kernel_line {ev.get('kernel_line')} instruction {ev.get('instruction')} share {ev.get('stall_share')} "
            f"estimate {f.get('estimated_speedup')}")
    for text in kernel_stalls(doc):
        log(text)


@pytest.fixture(scope="module")
def built() -> None:
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if not shutil.which("nvcc") and not Path(cuda, "bin", "nvcc").exists():
        pytest.skip(f"nvcc not found (PATH, {cuda}/bin): the planted kernels cannot be built")
    subprocess.run(["make", "-s", "-C", str(KERNELS), f"CUDA_HOME={cuda}"], check=True)
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), f"PYTHON={sys.executable}"], check=True)
    assert AGENT.exists(), "the CUPTI agent was not built (CUPTI headers?)"


def timed(rule: str, fixed: bool) -> float:
    """The median of REPEATS unprofiled runs (seconds): figures are medians, not best runs."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
    t = StdinTarget([sys.executable, str(script(rule)), *(["--fixed"] if fixed else [])], env=env)
    try:
        times = []
        for _ in range(REPEATS):
            t.go()
            times.append(float(t.expect("done").split()[1]))
        return statistics.median(times)
    finally:
        t.stop()


def profiled(daemon, rule: str, fixed: bool, tmp: Path, period: str | None = None,
             save: bool = True) -> dict[str, Any]:
    """One run under `deepctx run --pc-sampling`, stopped while the example lives (its frames named); the
    document, with the run's own time in doc["timed_s"]."""
    out = tmp / f"{rule}_{'fixed' if fixed else 'bad'}_{period}.json"
    period = period or os.environ.get("DEEPCTX_PC_PERIOD")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"} | {"DEEPCTX_SOCKET": daemon.socket}
    run = StdinTarget([*DEEPCTX, "run", "--quiet", "--mode", "exact", "--pc-sampling",
                       *(["--pc-period", period] if period else []), "-o", str(out), "--format", "json", "--",
                       sys.executable, str(script(rule)), *(["--fixed"] if fixed else [])], env=env)
    try:
        run.go()
        seconds = float(run.expect("done").split()[1])
        wait_for(lambda: (session_of(daemon, run.pid) or {}).get("state") == "capturing", what="capture running")
        stop = daemon.cli("stop", str(run.pid))
        assert stop.returncode == 0, stop.stderr
        wait_for(lambda: session_of(daemon, run.pid) is None, what="the capture to end", timeout=120)
        assert run.proc.stdin is not None
        run.proc.stdin.close()
        assert run.proc.wait(timeout=120) == 0
    finally:
        run.stop()
    doc = json.loads(out.read_text())
    annotate(doc, PC_LIMITS)
    doc["timed_s"] = seconds
    variant = "fixed" if fixed else "inefficient"
    diagnose(rule, variant + (f" --pc-period {period}" if period else ""), doc)
    if save:
        with lzma.open(stage(f"analyzer_{rule.replace('-', '_')}_{variant}.json.xz"), "wt") as f:
            json.dump(doc, f, separators=(",", ":"))
    return doc


@pytest.fixture(scope="module")
def results(daemon, built: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("pc_rules")
    out: dict[str, dict[str, Any]] = {}
    for rule in RULES:
        try:
            bad_s, fixed_s = timed(rule, False), timed(rule, True)
            out[rule] = {"bad_s": bad_s, "fixed_s": fixed_s, "bad": profiled(daemon, rule, False, tmp),
                         "fixed": profiled(daemon, rule, True, tmp)}
        except Exception as e:  # noqa: BLE001  (reported by the rule's own test)
            out[rule] = {"error": e}
        print(f"{rule}: {out[rule].get('bad_s')} s bad, {out[rule].get('fixed_s')} s fixed", flush=True)
    yield out
    write_table(out)


def at_marker(doc: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    path, line = script(rule).resolve(), line_of(script(rule), "LINE_" + rule.upper().replace("-", "_"))
    return [f for f in doc.get("findings", []) if f["rule"] == rule and f["location"]["file"]
            and Path(f["location"]["file"]).resolve() == path and f["location"]["line"] == line]


# A rule its planted pair cannot show to PC sampling: xfail, strict (a pass would mean the limitation is gone, and
# the docs must change with it). None now: warp-divergence, once one (PC samples carry no active-thread mask),
# reads the daemon's data flow over the SASS since its pair became two kernels (docs/analyzer.md, rule 14).
LIMITATIONS: dict[str, str] = {}
# The planted.cu line a rule's finding must name, where the finding's line is a fixed one (a comment
# `// <MARKER>` ends it): the lane-varying branch of branchy_lanes.
KERNEL_MARKERS = {"warp-divergence": "BRANCH_WARP_DIVERGENCE"}


def planted_line(marker: str) -> str:
    lines = [i for i, t in enumerate((KERNELS / "planted.cu").read_text().splitlines(), 1)
             if t.endswith(f"// {marker}")]
    assert len(lines) == 1, f"'// {marker}' ends lines {lines} of planted.cu, not one"
    return f"planted.cu:{lines[0]}"


@pytest.mark.parametrize("rule", [pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=LIMITATIONS[r]))
                                  if r in LIMITATIONS else r for r in RULES])
def test_rule_fires_on_its_planted_kernel_and_not_when_fixed(results: dict[str, dict[str, Any]], rule: str) -> None:
    r = results[rule]
    if "error" in r:
        raise r["error"]
    bad = r["bad"]
    assert bad["stats"].get("pc_sampling_samples", 0) > 0, bad["warnings"]
    assert bad["device"]["sm_count"] > 0
    status = next(s for s in bad["analysis"]["rules"] if s["rule"] == rule)
    found = at_marker(bad, rule)
    assert found, (status, [(f["rule"], f["location"]) for f in bad.get("findings", [])],
                   kernel_stalls(bad))
    assert found[0]["evidence"]["kernel_line"].startswith("planted.cu:")
    if rule in KERNEL_MARKERS:
        assert found[0]["evidence"]["kernel_line"] == planted_line(KERNEL_MARKERS[rule]), found[0]["evidence"]
        assert kernel_estimate(found[0]) is not None, "no estimate: the kernel's GPU time was not measured"
    assert at_marker(r["fixed"], rule) == [], ("fired on the fixed variant", kernel_stalls(r["fixed"]))
    assert r["fixed_s"] < r["bad_s"], f"the fix is not faster: {r['fixed_s']} s fixed, {r['bad_s']} s bad"


def kernel_estimate(finding: dict[str, Any] | None) -> float | None:
    """The rule's estimate with the kernel's own GPU time G as the baseline, not the whole run's T: G / (G - R),
    R = G x stall share x h (capped at 95% of G, as the analyzer caps it), the like of the measured speedup
    (the timed steps, all kernel)."""
    if not finding:
        return None
    g, r = finding["evidence"].get("gpu_time_ns"), finding["evidence"].get("removable_ns")
    if not g or r is None:
        return None
    return round(g / (g - min(r, 0.95 * g)), 2)


def write_table(results: dict[str, dict[str, Any]]) -> None:
    rows = ["| rule | kernel line | instruction | stall share | estimated, whole run | estimated, kernel | "
            "measured, kernel (bad / fixed) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    data = []
    for rule, r in results.items():
        if "error" in r:
            rows.append(f"| {rule} | error: {r['error']} | | | | | |")
            continue
        f = (at_marker(r["bad"], rule) or [None])[0]
        ev = f["evidence"] if f else {}
        measured = r["bad_s"] / r["fixed_s"] if r["fixed_s"] else None
        est = f["estimated_speedup"] if f else None
        kernel = kernel_estimate(f)
        rows.append(f"| {rule} | {ev.get('kernel_line', '-')} | {ev.get('instruction', '-')} | "
                    f"{ev.get('stall_share', '-')} | {est or '-'} | {f'{kernel}x' if kernel else '-'} | "
                    f"{measured:.2f}x |")
        data.append({"rule": rule, "estimated_speedup": est, "kernel_estimated_speedup": kernel,
                     "measured_speedup": measured, "evidence": ev,
                     "bad_s": r["bad_s"], "fixed_s": r["fixed_s"]})
    log("\n" + "\n".join(rows))
    stage("pc_rules_speedups.md").write_text("\n".join(rows) + "\n")
    stage("pc_rules_speedups.json").write_text(json.dumps(data, indent=1))


def stall_shares(doc: dict[str, Any], kernel: str) -> dict[str, float]:
    """deepctx's stall reasons of a kernel: share of its PC samples per reason."""
    totals: dict[str, int] = {}
    stack = [doc["root"]]
    while stack:
        n = stack.pop()
        stack += n["children"]
        if n["kind"] == "kernel" and kernel in n["name"]:
            inner = list(n["children"])
            while inner:
                m = inner.pop()
                inner += m["children"]
                for k, v in m["metrics"].items():
                    if m["kind"] == "gpu_instruction" and (k == "pc_samples" or k.startswith("stall_")):
                        totals[k] = totals.get(k, 0) + v
    n = totals.get("pc_samples", 0)
    return {k[len("stall_"):]: round(v / n, 3) for k, v in totals.items() if k.startswith("stall_") and n}


@pytest.mark.skipif(shutil.which("ncu") is None, reason="Nsight Compute (ncu) not on PATH")
def test_stall_reasons_beside_nsight_compute(results: dict[str, dict[str, Any]]) -> None:
    """Two kernels' stall shares from deepctx's PC samples and from ncu's own PC sampling (the
    smsp__pcsamp_warps_issue_stalled_* counters), side by side; written, not asserted beyond both having data
    (the two sample different runs)."""
    rows = ["| kernel | stall | deepctx share | ncu share |", "| --- | --- | --- | --- |"]
    metrics = ",".join([f"smsp__pcsamp_warps_issue_stalled_{s}" for s in STALLS] + ["smsp__pcsamp_sample_count"])
    for rule, kernel in NCU_KERNELS.items():
        r = results.get(rule) or {}
        if "bad" not in r:
            continue
        ours = stall_shares(r["bad"], kernel)
        p = subprocess.run(["ncu", "--clock-control", "none", "--metrics", metrics, "--csv", "-k", f"regex:{kernel}",
                            "-c", "1", sys.executable, str(script(rule)), "--once", "--steps", "1"],
                           capture_output=True, text=True, timeout=600, check=False)
        values: dict[str, float] = {}
        for line in p.stdout.splitlines():
            cells = [c.strip('"') for c in line.split('","')]
            if len(cells) > 3 and cells[-3].startswith("smsp__pcsamp"):
                try:
                    values[cells[-3]] = float(cells[-1].replace(",", ""))
                except ValueError:
                    pass
        total = values.get("smsp__pcsamp_sample_count") or sum(values.values())
        assert ours and total, (ours, p.stderr[-2000:])
        for s in STALLS:
            theirs = values.get(f"smsp__pcsamp_warps_issue_stalled_{s}", 0.0) / total
            if ours.get(s) or theirs > 0.01:
                rows.append(f"| {kernel} | {s} | {ours.get(s, 0.0):.3f} | {theirs:.3f} |")
    log("\n" + "\n".join(rows))
    stage("pc_rules_ncu.md").write_text("\n".join(rows) + "\n")


COST_PERIODS = ("8", "12", "16", "20")  # 2^N cycles between samples


def test_cost_per_period(daemon, built: None, tmp_path: Path) -> None:
    """What PC sampling costs a GPU-bound run (fp32-fma's bad SGEMM) at several periods: its timed steps
    unprofiled, and under `deepctx run --pc-sampling --pc-period N` (the run's own clock, so the capture's
    start and stop are not in it). Written to pc_sampling_cost.md; asserted only to be measured."""
    base = timed("fp32-fma", False)
    rows = ["| --pc-period | 2^N cycles | seconds | slowdown | samples |", "| --- | --- | --- | --- | --- |",
            f"| off | - | {base:.3f} | 1.00x | - |"]
    for period in COST_PERIODS:
        doc = profiled(daemon, "fp32-fma", False, tmp_path, period=period, save=False)
        rows.append(f"| {period} | {1 << int(period)} | {doc['timed_s']:.3f} | {doc['timed_s'] / base:.2f}x | "
                    f"{doc['stats'].get('pc_sampling_samples', 0)} |")
    log("\n" + "\n".join(rows))
    stage("pc_sampling_cost.md").write_text("\n".join(rows) + "\n")
    assert all(int(r.rsplit("|", 2)[1]) > 0 for r in rows[3:]), "a period took no samples (the log says why)"
