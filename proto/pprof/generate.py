"""Generates the Python code for proto/pprof/profile.proto (checked in; tests/unit/views/test_pprof_proto.py
fails when it drifts). profile.proto is Google's, copied verbatim from github.com/google/pprof (LICENSE beside it).

    python -m deepctx.proto.pprof.generate    # rewrite proto/pprof/profile_pb2.py(i)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

PPROF_DIR = Path(__file__).resolve().parent
PACKAGE_PATH = Path("deepctx/proto/pprof")  # import path of the generated module


def generate(out_dir: Path) -> list[Path]:
    """Runs protoc on profile.proto and writes profile_pb2.py and .pyi into out_dir (like proto/generate.py)."""
    from grpc_tools import protoc  # a test/dev dependency only

    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / PACKAGE_PATH
        stage.mkdir(parents=True)
        shutil.copy(PPROF_DIR / "profile.proto", stage / "profile.proto")
        args = ["protoc", f"-I{tmp}", f"--python_out={tmp}", f"--pyi_out={tmp}", str(PACKAGE_PATH / "profile.proto")]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in ("profile_pb2.py", "profile_pb2.pyi"):
            shutil.copy(stage / name, out_dir / name)
            written.append(out_dir / name)
        return written


if __name__ == "__main__":
    for path in generate(PPROF_DIR):
        print(path)
    sys.exit(0)
