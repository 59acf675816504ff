"""Rules and how they plug in: each rule is a module in rules/ with one class registered here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

from deepctx.profiles.analyzer.device import DeviceInfo
from deepctx.profiles.analyzer.finding import Finding
from deepctx.profiles.analyzer.index import ProfileIndex
from deepctx.profiles.analyzer.timing import TimeBasis


@dataclass(frozen=True)
class Limits:
    """When something is worth reporting. Documented in docs/analyzer.md."""

    min_speedup: float = 1.02  # findings whose estimate is lower are left out
    claim_speedup: float = 1.05  # findings whose estimate is lower are leads (confidence at most LEAD_CONFIDENCE)
    loop_calls: int = 20  # a call made this often from one line in one capture is in a loop
    launch_bound_launches: int = 100  # launches from one line before launch overhead is worth a finding
    min_share: float = 0.05  # share of T (or of the launches) a finding without a speedup estimate needs


@dataclass(frozen=True)
class Context:
    index: ProfileIndex
    basis: TimeBasis
    device: DeviceInfo
    limits: Limits


@dataclass(frozen=True)
class NotEvaluated:
    """The profile lacks what the rule needs (device time, a timeline): the rule says so, it never guesses."""

    reason: str


class Rule:
    id: ClassVar[str]
    number: ClassVar[int]  # the rule's number in issue 8, the order reports list rules in
    title: ClassVar[str]  # what the rule looks for, in a few words
    needs: ClassVar[str]  # "api" (calls and CPU samples), "device" (GPU time) or "timeline" (a trace)
    # the T its model needs (timing.py): "critical" (the critical thread, or the device when busier) or "wall"
    baseline: ClassVar[str] = "critical"

    def evaluate(self, ctx: Context) -> list[Finding] | NotEvaluated:
        raise NotImplementedError


RULES: dict[str, type[Rule]] = {}
R = TypeVar("R", bound=type[Rule])


def register(cls: R) -> R:
    if cls.id in RULES:
        raise ValueError(f"rule {cls.id} registered twice")
    RULES[cls.id] = cls
    return cls


def rule_ids() -> list[str]:
    from deepctx.profiles.analyzer import rules  # noqa: F401  (registers every rule)

    return sorted(RULES, key=lambda i: RULES[i].number)


def get_rules(ids: list[str] | None = None) -> list[Rule]:
    known = rule_ids()
    if ids is None:
        return [RULES[i]() for i in known]
    unknown = [i for i in ids if i not in RULES]
    if unknown:
        raise KeyError(", ".join(unknown))
    return [RULES[i]() for i in ids]
