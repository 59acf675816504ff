"""Runs the rules on a profile document: a pure function of the document, so it runs the same in the daemon
on a live capture and in the CLI on a file."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from deepctx.profiles.analyzer.device import DeviceInfo, device_info
from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import build_index
from deepctx.profiles.analyzer.registry import Context, Limits, NotEvaluated, get_rules
from deepctx.profiles.analyzer.timing import TimeBasis, time_basis

ANALYZER = "deepctx.analyzer/1"
LEAD_CONFIDENCE = 0.4  # below 0.5 a finding is a lead, not a claim (docs/analyzer.md)


@dataclass(frozen=True)
class RuleReport:
    rule: str
    title: str
    needs: str
    status: str  # "fired", "clear" or "not_evaluated"
    reason: str | None
    findings: int
    baseline: TimeBasis | None = None  # the T this rule's speedups are relative to

    def to_json(self) -> dict[str, Any]:
        out = {"rule": self.rule, "title": self.title, "needs": self.needs, "status": self.status,
               "reason": self.reason, "findings": self.findings}
        if self.baseline is not None:
            out["baseline"] = baseline_json(self.baseline)
        return out


def baseline_json(b: TimeBasis) -> dict[str, Any]:
    return {"kind": b.baseline, "time_ns": b.time_ns, "source": b.source}


@dataclass(frozen=True)
class Analysis:
    findings: list[Finding]
    rules: list[RuleReport]
    basis: TimeBasis
    device: DeviceInfo
    limits: Limits

    def findings_json(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in self.findings]

    def to_json(self) -> dict[str, Any]:
        b = self.basis
        return {
            "analyzer": ANALYZER,
            "time_ns": b.time_ns, "time_source": b.source, "host_time_ns": b.host_ns, "main_tid": b.main_tid,
            "critical_tid": b.critical_tid, "main_time_ns": b.main_ns, "wall_time_ns": b.wall_ns,
            "device_time": {"source": b.device.source, "busy_ns": b.device.busy_ns, "gpu_time_ns": b.device.gpu_time_ns},
            "device": {"name": self.device.name, "sm_count": self.device.sm_count, "source": self.device.source},
            "min_speedup": self.limits.min_speedup, "claim_speedup": self.limits.claim_speedup,
            "rules": [r.to_json() for r in self.rules],
        }


def _order(f: Finding) -> tuple[float, float, int]:
    return (-(f.estimated_speedup or 0.0), -f.confidence, -f.removable_ns)


def analyze(doc: dict[str, Any], limits: Limits | None = None, rules: list[str] | None = None) -> Analysis:
    limits = limits or Limits()
    idx = build_index(doc)
    basis = time_basis(doc, idx)
    device = device_info(doc)
    ctx = Context(idx, basis, device, limits)
    findings: list[Finding] = []
    reports: list[RuleReport] = []
    for rule in get_rules(rules):
        rule_basis = basis.for_baseline(rule.baseline)
        result = rule.evaluate(replace(ctx, basis=rule_basis))
        if isinstance(result, NotEvaluated):
            reports.append(RuleReport(rule.id, rule.title, rule.needs, "not_evaluated", result.reason, 0, rule_basis))
            continue
        kept: list[Finding] = []
        dropped: list[Finding] = []
        for f in result:
            if f.estimated_speedup is None or f.estimated_speedup >= limits.min_speedup:
                kept.append(f)
            else:
                dropped.append(f)
        dropped.sort(key=_order)
        for f in kept:  # a rule may give its own call path; else the representative one of the finding's line
            f.extra.setdefault("speedup_baseline", baseline_json(rule_basis))
            if not f.call_path and f.site is not None:
                f.call_path = idx.paths.get(f.site, ())
            if f.estimated_speedup is not None and f.estimated_speedup < limits.claim_speedup:
                # a gain this small is within what the estimate's model can be off by: worth a look, not a claim
                f.confidence = min(f.confidence, LEAD_CONFIDENCE)
        reason = None
        if dropped:
            best = dropped[0]
            where = best.site.label() if best.site else "no location"
            reason = (f"{len(dropped)} candidate(s) below the {limits.min_speedup}x threshold "
                      f"(best {best.estimated_speedup}x at {where})")
        reports.append(RuleReport(rule.id, rule.title, rule.needs, "fired" if kept else "clear", reason, len(kept),
                                  rule_basis))
        findings.extend(kept)
    findings.sort(key=_order)
    return Analysis(findings, reports, basis, device, limits)


def annotate(doc: dict[str, Any], limits: Limits | None = None, rules: list[str] | None = None) -> Analysis:
    """Runs the analyzer and stores its findings and its account of each rule in the document."""
    result = analyze(doc, limits, rules)
    doc["findings"] = result.findings_json()
    doc["analysis"] = result.to_json()
    return result
