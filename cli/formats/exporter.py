"""The protocol every export format implements, and the registry `deepctx export --to` picks from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol


@dataclass(frozen=True)
class ExportOptions:
    metric: str | None = None  # formats with one value per sample (folded): which metric; None: the default


class Exporter(Protocol):
    name: ClassVar[str]
    suffix: ClassVar[str]  # the usual file name ending
    binary: ClassVar[bool]

    def export(self, doc: dict[str, Any], options: ExportOptions) -> bytes | str: ...


def exporters() -> dict[str, type[Exporter]]:
    from deepctx.cli.formats.chrome import ChromeTrace
    from deepctx.cli.formats.folded import FoldedStacks
    from deepctx.cli.formats.hatchet import HatchetLiteral
    from deepctx.cli.formats.pprof import Pprof
    from deepctx.cli.formats.speedscope import Speedscope

    return {e.name: e for e in (Pprof, Speedscope, ChromeTrace, HatchetLiteral, FoldedStacks)}
