"""A finding: one problem the analyzer found, where to fix it, the measured facts, and what it is worth."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deepctx.profiles.analyzer.index import Site

MAX_PATH = 12  # outermost and innermost frames of longer call paths


@dataclass
class Finding:
    rule: str
    title: str
    site: Site | None
    evidence: dict[str, Any]
    suggestion: str
    estimated_speedup: float | None
    confidence: float
    model: str  # how estimated_speedup was computed, with the inputs that were assumed rather than measured
    call_path: tuple[Site, ...] = ()  # left empty, the engine fills in the site's representative path
    removable_ns: int = 0  # the time the model says the fix removes; orders findings of equal speedup
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        s = self.site
        location = {"file": s.file if s else None, "line": s.line if s else None, "function": s.function if s else None}
        path = [p.label() for p in self.call_path]
        if len(path) > MAX_PATH:  # two outermost, a marker, the innermost rest
            path = path[:2] + [f"… {len(path) - (MAX_PATH - 1)} frames …"] + path[-(MAX_PATH - 3):]
        return {"rule": self.rule, "title": self.title, "location": location, "call_path": path,
                "evidence": self.evidence, "suggestion": self.suggestion,
                "estimated_speedup": self.estimated_speedup, "speedup_model": self.model,
                "confidence": round(self.confidence, 2), **self.extra}
