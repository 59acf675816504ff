"""A test producer for the window store: recorded H200 profiles (tests/fixtures/profiles) cut into
windows, as continuous mode would store them. Every window of a fixture holds that fixture's whole
profile, so a query over k windows must add up to exactly k times the fixture's metrics."""

from __future__ import annotations

import functools
import json
import lzma
from dataclasses import replace
from pathlib import Path
from typing import Any

from deepctx.daemon.store import Window

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "profiles"
NAMES = ("h200_torch_ops", "h200_triton_kernel", "h200_jax_jit")
# One container per fixture: a docker-style id, a podman-style id, and a plain host cgroup.
CONTAINERS = {"h200_torch_ops": "a1" * 32, "h200_triton_kernel": "b2" * 32, "h200_jax_jit": "/user.slice/jax.scope"}


@functools.cache
def _raw(name: str) -> bytes:
    return lzma.decompress((FIXTURES / f"{name}.json.xz").read_bytes())


def fixture(name: str) -> dict[str, Any]:
    """A fresh copy of a recorded profile."""
    return json.loads(_raw(name))


def windows(start_unix: float, per_fixture: int, window_s: float = 60.0, host: str = "gpu-test-01",
            names: tuple[str, ...] = NAMES, uid: int = 0) -> list[Window]:
    """per_fixture consecutive windows of window_s seconds from start_unix for each fixture (the windows of
    one fixture share its tree: nothing that stores or merges windows changes them)."""
    out: list[Window] = []
    for name in names:
        doc = fixture(name)
        for i in range(per_fixture):
            start = start_unix + i * window_s
            w_doc = dict(doc, started_unix=start, duration_s=window_s, hostname=host)
            out.append(Window(host=host, pid=doc["pid"], command=doc["command"], container=CONTAINERS[name],
                              start_unix=start, end_unix=start + window_s, profile=w_doc, uid=uid))
    return out


def with_host(ws: list[Window], host: str) -> list[Window]:
    return [replace(w, host=host, profile=dict(w.profile, hostname=host)) for w in ws]


def totals(doc: dict[str, Any]) -> dict[str, int]:
    """Every metric summed over a document's tree."""
    out: dict[str, int] = dict.fromkeys(doc["metrics"], 0)
    stack = [doc["root"]]
    while stack:
        n = stack.pop()
        for k, v in n["metrics"].items():
            out[k] += v
        stack.extend(n["children"])
    return out
