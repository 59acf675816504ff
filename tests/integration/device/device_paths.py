"""Paths of the device-activity tier (imported by name: `conftest` is ambiguous across test folders)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
AGENT = REPO / "native" / "build" / "libdeepctx_cupti.so"
MOCKS = REPO / "tests" / "mocks" / "build" / "lib"
TARGET = Path(__file__).resolve().parent / "mock_target.py"
ROCPROF_AGENT = REPO / "native" / "build" / "libdeepctx_rocprof.so"
