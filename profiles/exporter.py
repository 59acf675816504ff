"""The protocol every export format implements (the CLI's formats, and the pprof writer the daemon's
Pyroscope push uses too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from deepctx.profiles.fold import VIEWS_DEFAULT, Fold


@dataclass(frozen=True)
class ExportOptions:
    metric: str | None = None  # formats with one value per sample (folded): which metric; None: the default
    # what the call paths fold, as in report and the HTML report: start-up and plumbing frames by default
    fold: Fold = VIEWS_DEFAULT


class Exporter(Protocol):
    name: ClassVar[str]
    suffix: ClassVar[str]  # the usual file name ending
    binary: ClassVar[bool]

    def export(self, doc: dict[str, Any], options: ExportOptions) -> bytes | str: ...
