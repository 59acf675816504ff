"""The registry `deepctx export --to` picks from (profiles/exporter.py: the protocol each format implements)."""

from __future__ import annotations

from deepctx.profiles.exporter import Exporter


def exporters() -> dict[str, type[Exporter]]:
    from deepctx.cli.formats.chrome import ChromeTrace
    from deepctx.cli.formats.folded import FoldedStacks
    from deepctx.cli.formats.hatchet import HatchetLiteral
    from deepctx.cli.formats.speedscope import Speedscope
    from deepctx.profiles.pprof import Pprof

    return {e.name: e for e in (Pprof, Speedscope, ChromeTrace, HatchetLiteral, FoldedStacks)}
