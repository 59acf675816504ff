"""The rules on their examples' profiles recorded on the GPU host by tests/gpu/test_analyzer.py (its
$DEEPCTX_ARTIFACTS/analyzer_<rule>_<variant>.json.gz, copied to tests/fixtures/profiles/analyzer/): each rule
fires at its example's marked line and not on the fixed variant, in CI, without a GPU. Skipped only for the
rules listed in PENDING."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import line_of

from deepctx.cli.views.document import load
from deepctx.profile.analyzer import analyze, rule_ids

REPO = Path(__file__).resolve().parents[3]
RECORDED = REPO / "tests" / "fixtures" / "profiles" / "analyzer"
EXAMPLES = REPO / "examples" / "inefficiencies"


# Rules whose example is being reworked, so their recording is not kept yet (BENCHMARKS.md says why).
# Any other rule without a recording fails: a rule cannot land untested in CI.
PENDING: dict[str, str] = {
    rule: "PC-sampling rule: its planted kernels (examples/inefficiencies/kernels) are recorded by "
          "tests/gpu/test_planted_kernels.py on the H200 host, not run there yet"
    for rule in ("long-scoreboard", "uncoalesced-access", "bank-conflicts", "warp-divergence", "fp32-fma",
                 "low-occupancy")
}


def recording(rule: str, variant: str) -> Path:
    path = RECORDED / f"analyzer_{rule.replace('-', '_')}_{variant}.json.gz"
    if rule in PENDING:
        assert not path.exists(), f"{rule} has a recording now: take it out of PENDING"
        pytest.skip(f"{rule}: {PENDING[rule]}")
    assert path.exists(), f"no recording {path.name} (run tests/gpu/test_analyzer.py on the GPU host)"
    return path


def marked_line(rule: str) -> tuple[str, int]:
    name = rule.replace("-", "_") + ".py"
    return name, line_of(EXAMPLES / name, "LINE_" + rule.upper().replace("-", "_"))


@pytest.mark.parametrize("rule", rule_ids())
def test_rule_on_its_recorded_example(rule: str) -> None:
    bad = analyze(load(recording(rule, "inefficient")), rules=[rule])
    good = analyze(load(recording(rule, "fixed")), rules=[rule])
    assert good.findings == [], [f.to_json() for f in good.findings]
    if bad.rules[0].status == "not_evaluated":
        pytest.skip(f"recorded without what {rule} needs: {bad.rules[0].reason}")
    name, line = marked_line(rule)
    at = [(Path(f.site.file).name, f.site.line) for f in bad.findings if f.site and f.site.file]
    assert (name, line) in at, (bad.rules[0], at)


@pytest.mark.parametrize("model", ["resnet50", "gpt2"])
def test_no_confident_finding_on_a_recorded_well_tuned_loop(model: str) -> None:
    """examples/inefficiencies/well_tuned.py (ResNet-50 at batch 256, GPT-2 small at 32x512, bf16 autocast) as
    recorded on the H200: whatever fires stays below confidence 0.5 (a lead)."""
    a = analyze(load(RECORDED / f"analyzer_well_tuned_{model}.json.gz"))
    assert a.findings, "the recording has leads: the test would pass vacuously without them"
    assert [(f.rule, f.confidence) for f in a.findings if f.confidence >= 0.5] == []
