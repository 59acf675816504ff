"""A gpu_function node's `branches` (docs/formats.md, "Inside a kernel"): the lane-varying conditional branches of
its SASS (host/sass_uniformity.py), as the document has them and as the Profile message carries them."""

from __future__ import annotations

from typing import Any

from deepctx.host.sass_uniformity import Branch
from deepctx.proto.v1 import deepctx_pb2 as pb

LISTED = ("varying", "unknown")  # warp-uniform branches are not listed
MAX_BRANCHES = 64  # per function, lane-varying ones first: a large kernel's unknowns do not swell every node


def ranges(offsets: tuple[int, ...], step: int = 16) -> list[list[int]]:
    """Ascending instruction offsets -> [start, end) runs."""
    out: list[list[int]] = []
    for o in offsets:
        if out and out[-1][1] == o:
            out[-1][1] = o + step
        else:
            out.append([o, o + step])
    return out


def from_analysis(branches: list[Branch], block_x: int | None) -> list[dict[str, Any]]:
    listed = sorted((b for b in branches if b.lanes in LISTED), key=lambda b: (b.lanes != "varying", b.offset))
    out = []
    for b in listed[:MAX_BRANCHES]:
        r = b.region
        out.append({"offset": b.offset, "instruction": b.text, "file": b.file, "line": b.line, "kind": b.kind,
                    "lanes": b.lanes, "predicate": b.predicate, "source": b.source,
                    "reconverge": r.reconverge if r else None, "taken": ranges(r.taken) if r else [],
                    "fallthrough": ranges(r.fallthrough) if r else [], "block_x": block_x})
    return out


def _pairs(flat: list[int]) -> list[list[int]]:
    return [[flat[k], flat[k + 1]] for k in range(0, len(flat) - 1, 2)]


def branch_doc(m: pb.GpuBranch) -> dict[str, Any]:
    return {"offset": m.offset, "instruction": m.instruction, "file": m.file or None, "line": m.line or None,
            "kind": m.kind, "lanes": m.lanes, "predicate": m.predicate, "source": m.source,
            "reconverge": m.reconverge if m.HasField("reconverge") else None,
            "taken": _pairs(list(m.taken)), "fallthrough": _pairs(list(m.fallthrough)),
            "block_x": m.block_x or None}


def branch_message(d: dict[str, Any]) -> pb.GpuBranch:
    m = pb.GpuBranch(offset=int(d.get("offset") or 0), instruction=str(d.get("instruction") or ""),
                     file=str(d.get("file") or ""), line=int(d.get("line") or 0), kind=str(d.get("kind") or ""),
                     lanes=str(d.get("lanes") or ""), predicate=str(d.get("predicate") or ""),
                     source=str(d.get("source") or ""), block_x=int(d.get("block_x") or 0),
                     taken=[int(x) for r in d.get("taken") or [] for x in r],
                     fallthrough=[int(x) for r in d.get("fallthrough") or [] for x in r])
    if d.get("reconverge") is not None:
        m.reconverge = int(d["reconverge"])
    return m
