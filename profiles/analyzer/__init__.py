"""The analyzer: rules that read a profile document and report problems with their evidence, a concrete fix
and an estimated speedup (docs/analyzer.md). Pure Python on the document alone: no BPF, no gRPC."""

from deepctx.profiles.analyzer.engine import ANALYZER, Analysis, RuleReport, analyze, annotate
from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.registry import Limits, rule_ids

__all__ = ["ANALYZER", "Analysis", "Finding", "Limits", "RuleReport", "analyze", "annotate", "rule_ids"]
