"""The checked-in generated code must be what protoc makes of proto/v1/*.proto today."""

from __future__ import annotations

from pathlib import Path

from deepctx.proto.generate import PROTO_DIR, generate


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    written = generate(tmp_path)
    assert {p.name for p in written} == {"deepctx_pb2.py", "deepctx_pb2.pyi", "deepctx_pb2_grpc.py"}
    for p in written:
        checked_in = PROTO_DIR / "v1" / p.name
        assert checked_in.read_text() == p.read_text(), (
            f"{checked_in} is stale: run `python -m deepctx.proto.generate` and commit the result")
