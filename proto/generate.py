"""Generates the Python code for proto/v1/*.proto (checked in; tests/unit/test_proto_drift.py fails when it drifts).

    python -m deepctx.proto.generate          # rewrite proto/v1/*_pb2*.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
PACKAGE_PATH = Path("deepctx/proto/v1")  # import path of the generated modules


def generate(out_dir: Path) -> list[Path]:
    """Runs protoc on every .proto in v1/ and writes the generated modules into out_dir."""
    from grpc_tools import protoc  # a test/dev dependency only

    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / PACKAGE_PATH
        stage.mkdir(parents=True)
        sources = sorted((PROTO_DIR / "v1").glob("*.proto"))
        for src in sources:
            shutil.copy(src, stage / src.name)
        include = str(Path(protoc.__file__).parent / "_proto")
        args = ["protoc", f"-I{tmp}", f"-I{include}", f"--python_out={tmp}", f"--pyi_out={tmp}",
                f"--grpc_python_out={tmp}"] + [str(PACKAGE_PATH / s.name) for s in sources]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for f in sorted(stage.iterdir()):
            if f.suffix in (".py", ".pyi") and "_pb2" in f.name:
                shutil.copy(f, out_dir / f.name)
                written.append(out_dir / f.name)
        return written


if __name__ == "__main__":
    for path in generate(PROTO_DIR / "v1"):
        print(path)
    sys.exit(0)
