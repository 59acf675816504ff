"""The analyzer on its example programs (examples/inefficiencies/), on a GPU host: each rule fires at the
line marked `# LINE_<RULE>` of its example and not on the --fixed variant; the estimated speedup is set
against the achieved one (time of the inefficient variant / time of the fixed one, both unprofiled).
The table is printed and, with $DEEPCTX_ARTIFACTS set, written there (analyzer_speedups.md and .json),
with every profile (analyzer_<rule>_<variant>.json.xz, fixtures for the CPU-only tests).

Device activity: the examples start with the CUPTI agent (CUDA_INJECTION64_PATH, built from native/ as in
test_device_activity.py), so rules that need GPU time get it; rules that need a timeline are captured with
--trace. Without the agent those rules must say they were not evaluated (their tests then skip).
Expect about 10 minutes for all rules (-s shows progress).

Environment: DEEPCTX_ANALYZER_RULES=r1,r2 (a subset), DEEPCTX_ANALYZER_REPEATS (unprofiled timed runs per
variant, the fastest counts; default 2), DEEPCTX_ANALYZER_ATTACH_ARGS (extra attach arguments),
DEEPCTX_ANALYZER_NO_AGENT=1 (profile without device activity)."""

from __future__ import annotations

import json
import lzma
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from harness import StdinTarget, line_of, profile_phase

from deepctx.profiles.analyzer import annotate, rule_ids
from deepctx.profiles.analyzer.registry import RULES as RULE_CLASSES

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "inefficiencies"
AGENT = REPO / "native" / "build" / "libdeepctx_cupti.so"
# The PC-sampling rules have their planted kernels and their own test (test_planted_kernels.py: deepctx run --pc-sampling)
PC_RULES = {"long-scoreboard", "uncoalesced-access", "bank-conflicts", "warp-divergence", "fp32-fma", "low-occupancy"}
RULES = [r for r in rule_ids() if r in os.environ.get("DEEPCTX_ANALYZER_RULES", ",".join(rule_ids())).split(",")
         and r not in PC_RULES]
REPEATS = int(os.environ.get("DEEPCTX_ANALYZER_REPEATS", "2"))
NEEDS_GPUS = {"collective-not-overlapped": 2}  # data parallel: its fix overlaps a real link's transfers
LOW_CONFIDENCE = 0.5  # findings below it are leads, not claims
SAMPLE_HZ = "499"  # more CPU samples per second than the default 99: host times per line need them


def script(rule: str) -> Path:
    return EXAMPLES / (rule.replace("-", "_") + ".py")


def marker(rule: str) -> str:
    return "LINE_" + rule.upper().replace("-", "_")


@dataclass
class Run:
    rule: str
    variant: str  # "inefficient", "fixed" or a well-tuned model
    seconds: float
    doc: dict[str, Any] = field(repr=False)

    def findings(self, rule: str | None = None) -> list[dict[str, Any]]:
        return [f for f in self.doc["findings"] if rule is None or f["rule"] == rule]

    def status(self, rule: str) -> dict[str, Any]:
        return next(r for r in self.doc["analysis"]["rules"] if r["rule"] == rule)

    @property
    def device_time(self) -> str:
        return self.doc["analysis"]["device_time"]["source"]


def agent_env() -> dict[str, str]:
    """The examples' environment: with the CUPTI agent loaded at cuInit when it can be built here."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH"}
    if os.environ.get("DEEPCTX_ANALYZER_NO_AGENT"):
        return env
    subprocess.run(["make", "-s", "-C", str(REPO / "native"), f"PYTHON={sys.executable}"], check=False)
    if AGENT.exists():
        env["CUDA_INJECTION64_PATH"] = str(AGENT)
    return env


def attach_args(rule: str) -> list[str]:
    """More CPU samples than the default (host times per line need them); a trace where the rule reads a timeline."""
    args = ["--rate", SAMPLE_HZ] + shlex.split(os.environ.get("DEEPCTX_ANALYZER_ATTACH_ARGS", ""))
    needs = RULE_CLASSES[rule].needs if rule in RULE_CLASSES else "api"
    return args + (["--trace"] if needs in ("device", "timeline") else [])


def measure(daemon, rule: str, argv: list[str], variant: str, env: dict[str, str]) -> Run:
    """Times the variant REPEATS times unprofiled, then profiles one more run and analyzes it."""
    t = StdinTarget([sys.executable, *argv], env=env)
    began = time.monotonic()
    try:
        times = []
        for _ in range(REPEATS):
            t.go()
            times.append(float(t.expect("done").split()[1]))
        doc = profile_phase(daemon, t, *attach_args(rule))
    finally:
        t.stop()
    annotate(doc)
    print(f"{rule} {variant}: {min(times):.3f} s unprofiled; {time.monotonic() - began:.0f} s in all; device time "
          f"{doc['analysis']['device_time']['source']}; findings {[(f['rule'], f['location']['line']) for f in doc['findings']]}",
          flush=True)
    out = os.environ.get("DEEPCTX_ARTIFACTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        with lzma.open(Path(out) / f"analyzer_{rule.replace('-', '_')}_{variant}.json.xz", "wt") as f:
            json.dump(doc, f, separators=(",", ":"))
    return Run(rule, variant, min(times), doc)


@pytest.fixture(scope="module")
def runs(daemon) -> dict[tuple[str, str], Run | Exception]:
    """Every example, both variants; a failing example is kept as its error (its own test fails with it)."""
    env = agent_env()
    print(f"\nCUPTI agent: {env.get('CUDA_INJECTION64_PATH', 'none')}", flush=True)
    out: dict[tuple[str, str], Run | Exception] = {}
    for rule in RULES:
        if gpus() < NEEDS_GPUS.get(rule, 1):
            continue
        for variant in ("inefficient", "fixed"):
            argv = [str(script(rule))] + (["--fixed"] if variant == "fixed" else [])
            # torch.compile's structured trace, as `deepctx run` sets it: the compile rules read it
            traced = {**env, "TORCH_TRACE": tempfile.mkdtemp(prefix="deepctx-analyzer-trace-")}
            try:
                out[(rule, variant)] = measure(daemon, rule, argv, variant, traced)
            except Exception as e:  # noqa: BLE001  (reported by the rule's test)
                out[(rule, variant)] = e
    yield out
    write_table({k: v for k, v in out.items() if isinstance(v, Run)})


def gpus() -> int:
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return sum(line.startswith("GPU ") for line in r.stdout.splitlines())


def at_marker(run: Run, rule: str) -> list[dict[str, Any]]:
    path, line = script(rule).resolve(), line_of(script(rule), marker(rule))
    return [f for f in run.findings(rule)
            if f["location"]["file"] and Path(f["location"]["file"]).resolve() == path and f["location"]["line"] == line]


@pytest.mark.parametrize("rule", RULES)
def test_rule_fires_at_the_marked_line_and_not_when_fixed(runs: dict[tuple[str, str], Run | Exception],
                                                          rule: str) -> None:
    if gpus() < NEEDS_GPUS.get(rule, 1):
        pytest.skip(f"{rule} needs {NEEDS_GPUS[rule]} GPUs; this host has {gpus()}")
    bad, good = runs[(rule, "inefficient")], runs[(rule, "fixed")]
    for r in (bad, good):
        if isinstance(r, Exception):
            raise r
    assert isinstance(bad, Run) and isinstance(good, Run)
    # whether the fix pays off is measured, not asserted: the table (BENCHMARKS.md) shows it
    assert good.findings(rule) == [], f"{rule} fired on the fixed variant: {good.findings(rule)}"
    status = bad.status(rule)
    if status["status"] == "not_evaluated":
        # rules that need device time or a timeline say so; they never fire on missing data
        assert status["reason"] and bad.findings(rule) == []
        pytest.skip(f"{rule} not evaluated: {status['reason']}")
    found = at_marker(bad, rule)
    assert found, (f"{rule} did not fire at {script(rule).name}:{line_of(script(rule), marker(rule))}: "
                   f"{status}; findings: {[(f['rule'], f['location']) for f in bad.findings()]}")


@pytest.mark.parametrize("model", ["resnet50", "gpt2"])
def test_well_tuned_loop_has_no_confident_finding(daemon, model: str) -> None:
    pytest.importorskip({"resnet50": "torchvision", "gpt2": "transformers"}[model])
    run = measure(daemon, "well-tuned", [str(EXAMPLES / "well_tuned.py"), model], model, agent_env())
    low = [(f["rule"], f["confidence"], f["estimated_speedup"], f["location"]) for f in run.findings()
           if f["confidence"] < LOW_CONFIDENCE]
    print(f"\n{model}: low-confidence findings: {low}")
    confident = [(f["rule"], f["confidence"], f["estimated_speedup"], f["location"], f["evidence"])
                 for f in run.findings() if f["confidence"] >= LOW_CONFIDENCE]
    assert confident == [], f"{model}: {confident}"


def row(rule: str, bad: Run, good: Run) -> dict[str, Any]:
    found = at_marker(bad, rule)
    status = bad.status(rule)["status"]
    f = found[0] if found else None
    return {"rule": rule, "example": script(rule).name, "status": status if not found else "fired at the line",
            "estimated": f["estimated_speedup"] if f else None, "confidence": f["confidence"] if f else None,
            "achieved": round(bad.seconds / good.seconds, 2), "inefficient_s": round(bad.seconds, 3),
            "fixed_s": round(good.seconds, 3), "fixed_clean": not good.findings(rule), "device_time": bad.device_time,
            "reason": bad.status(rule)["reason"]}


def write_table(runs: dict[tuple[str, str], Run]) -> None:
    rows = [row(r, runs[(r, "inefficient")], runs[(r, "fixed")]) for r in RULES
            if (r, "inefficient") in runs and (r, "fixed") in runs]
    head = "| rule | example | inefficient s | fixed s | achieved | estimated | confidence | at the line | fixed clean | device time |"
    lines = [head, "| " + " | ".join(["---"] * 10) + " |"]
    for x in rows:
        est = f"{x['estimated']}x" if x["estimated"] is not None else ("not estimated" if x["status"] ==
                                                                         "fired at the line" else x["status"])
        lines.append(f"| {x['rule']} | {x['example']} | {x['inefficient_s']} | {x['fixed_s']} | {x['achieved']}x | "
                     f"{est} | {x['confidence'] if x['confidence'] is not None else ''} | "
                     f"{'yes' if x['status'] == 'fired at the line' else 'no'} | {'yes' if x['fixed_clean'] else 'no'} | "
                     f"{x['device_time']} |")
    table = "\n".join(lines)
    print("\n" + table)
    out = os.environ.get("DEEPCTX_ARTIFACTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "analyzer_speedups.md").write_text(table + "\n")
        (Path(out) / "analyzer_speedups.json").write_text(json.dumps(rows, indent=1) + "\n")
