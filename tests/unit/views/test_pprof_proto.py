"""The checked-in pprof code must be what protoc makes of proto/pprof/profile.proto today."""

from __future__ import annotations

from pathlib import Path

from deepctx.proto.pprof.generate import PPROF_DIR, generate


def test_generated_pprof_code_matches_the_proto(tmp_path: Path) -> None:
    written = generate(tmp_path)
    assert {p.name for p in written} == {"profile_pb2.py", "profile_pb2.pyi"}
    for p in written:
        checked_in = PPROF_DIR / p.name
        assert checked_in.read_text() == p.read_text(), (
            f"{checked_in} is stale: run `python -m deepctx.proto.pprof.generate` and commit the result")
