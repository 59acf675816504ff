"""Synthetic profile documents (deepctx.profile/v1) with known contents, for view, export and HTML tests."""

from __future__ import annotations

import random
from typing import Any

METRICS = ["cpu_samples", "calls", "api_time_ns", "gpu_time_ns", "bytes", "sync_wait_ns"]


def frame(kind: str, name: str, file: str | None = None, line: int | None = None, module: str | None = None,
          **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "name": name, "file": file, "line": line, "module": module, **extra}


def py(name: str, file: str, line: int) -> dict[str, Any]:
    return frame("python", name, file, line)


def nat(name: str, module: str = "libapp.so") -> dict[str, Any]:
    return frame("native", name, module=module)


def thread(name: str, tid: int) -> dict[str, Any]:
    return frame("thread", name, tid=tid)


class Builder:
    """Adds call paths with self values; equal frames under one parent become one node (like the daemon)."""

    def __init__(self, command: str = "python train.py", pid: int = 4242) -> None:
        self.doc: dict[str, Any] = {
            "schema": "deepctx.profile/v1", "pid": pid, "command": command, "hostname": "test",
            "started_unix": 1_796_000_000.0, "duration_s": 2.0, "ended": "duration", "sample_hz": 99,
            "mode": "exact", "metrics": list(METRICS), "root": self._node(frame("root", command)),
            "stats": {"cpu_samples": 0}, "warnings": [],
        }
        self._index: dict[int, dict[tuple, dict[str, Any]]] = {}

    @staticmethod
    def _node(f: dict[str, Any]) -> dict[str, Any]:
        return {**f, "metrics": dict.fromkeys(METRICS, 0), "children": []}

    def add(self, path: list[dict[str, Any]], **values: int) -> dict[str, Any]:
        node = self.doc["root"]
        for f in path:
            key = (f["kind"], f["name"], f.get("file"), f.get("line"), f.get("module"), f.get("tid"))
            kids = self._index.setdefault(id(node), {})
            child = kids.get(key)
            if child is None:
                child = kids[key] = self._node(f)
                node["children"].append(child)
            node = child
        for m, v in values.items():
            node["metrics"][m] += v
        return node


def count_nodes(doc: dict[str, Any]) -> int:
    n, stack = 0, [doc["root"]]
    while stack:
        x = stack.pop()
        n += 1
        stack.extend(x["children"])
    return n


def big_profile(nodes: int = 100_000, seed: int = 7, source: str = "/srv/app/model.py") -> dict[str, Any]:
    """About `nodes` nodes: 8 threads, Python frames over a few files, native frames, GPU launches."""
    rng = random.Random(seed)
    b = Builder("python big.py")
    doc = b.doc
    threads = [b.add([thread("python3" if t == 0 else f"worker{t}", 1000 + t)]) for t in range(8)]
    frontier: list[tuple[dict[str, Any], int]] = [(t, 0) for t in threads]
    made = 1 + len(threads)
    serial = 0
    seen: dict[int, set[tuple | str]] = {}
    while made < nodes:
        parent, depth = frontier[rng.randrange(len(frontier))]
        serial += 1
        r = rng.random()
        if depth > 3 and r < 0.08:
            api = Builder._node(frame("api", "cudaLaunchKernel", module="libcudart.so.13"))
            k = Builder._node(frame("kernel", f"kernel_{serial % 500}", grid=[128, 1, 1], block=[256, 1, 1],
                                    shared_mem=0, stream=serial % 4))
            calls = rng.randint(1, 100)
            k["metrics"].update(calls=calls, api_time_ns=calls * 4000, gpu_time_ns=calls * rng.randint(1000, 90000))
            taken = seen.setdefault(id(parent), set())
            if "api" in taken:  # siblings never share a frame: one cudaLaunchKernel per caller
                continue
            taken.add("api")
            api["children"].append(k)
            parent["children"].append(api)
            made += 2
            continue
        # Names from a pool, as in real code: the same functions on many paths (bottom-up merges them).
        if r < 0.5:
            f = py(f"fn_{serial % 1500}", source if serial % 3 else f"/srv/app/mod_{serial % 40}.py", 1 + serial % 300)
        else:
            f = nat(f"native_{serial % 2500}", f"lib{serial % 30}.so")
        key = (f["kind"], f["name"], f["file"], f["line"], f["module"])
        taken = seen.setdefault(id(parent), set())
        if key in taken:  # siblings never share a frame (docs/formats.md)
            continue
        taken.add(key)
        node = Builder._node(f)
        node["metrics"]["cpu_samples"] = rng.randint(0, 5) if rng.random() < 0.6 else 0
        parent["children"].append(node)
        made += 1
        if depth < 60:
            frontier.append((node, depth + 1))
    return doc


SOURCE_TEXT = """import torch


def multiply(x):
    y = x
    for _ in range(1000):
        y = x * 2  # hot line 7
    return y


def read_scalars(x):
    total = 0.0
    for _ in range(50):
        total += x.sum().item()  # line 14
    return total


def main():
    # known lines: 21 multiply, 22 read_scalars, 23 the call of main
    x = torch.ones(1024, device="cuda")
    multiply(x)
    read_scalars(x)
main()
"""


def gpu_profile(source_file: str, mul_calls: int = 1000, item_calls: int = 50, extra_kernel: bool = False,
                cpu_in_main: int = 30, command: str = "python train.py") -> dict[str, Any]:
    """A PyTorch-like profile whose Python frames point into source_file (SOURCE_TEXT)."""
    b = Builder(command)
    t = thread("python3", 4242)
    main = py("main", source_file, 21)
    mul = [t, py("<module>", source_file, 23), main, py("multiply", source_file, 7)]
    launch = frame("api", "cudaLaunchKernel", module="libcudart.so.13")
    b.add(mul + [launch, frame("kernel", "vectorized_elementwise_kernel", grid=[1, 1, 1], block=[128, 1, 1],
                                shared_mem=0, stream=7)],
          calls=mul_calls, api_time_ns=mul_calls * 7000, gpu_time_ns=mul_calls * 2000)
    item = [t, py("<module>", source_file, 23), py("main", source_file, 22), py("read_scalars", source_file, 14)]
    b.add(item + [frame("api", "cudaMemcpyAsync", module="libcudart.so.13"), frame("memcpy", "DtoH", stream=7)],
          calls=item_calls, api_time_ns=item_calls * 6000, gpu_time_ns=item_calls * 1500, bytes=item_calls * 4)
    b.add(item + [frame("api", "cudaStreamSynchronize", module="libcudart.so.13"), frame("sync", "stream", stream=7)],
          calls=item_calls, api_time_ns=item_calls * 5000, sync_wait_ns=item_calls * 4000)
    b.add([t, py("<module>", source_file, 23), main], cpu_samples=cpu_in_main)
    b.add([t, py("<module>", source_file, 23), main, nat("PyObject_Malloc", "python3.12")], cpu_samples=5)
    b.add(mul + [nat("at::native::mul_kernel_cuda", "libtorch_cuda.so")], cpu_samples=12)
    if extra_kernel:
        b.add(mul + [launch, frame("kernel", "fused_gelu_kernel", grid=[64, 1, 1], block=[256, 1, 1], shared_mem=0,
                                   stream=7)], calls=10, api_time_ns=70_000, gpu_time_ns=500_000)
    return b.doc


def trace_events() -> list[dict[str, Any]]:
    """A small recorded timeline: launches on one thread, kernels on stream 7, linked by correlation ids."""
    events = []
    for k in range(5):
        t0 = 1_000_000 + k * 100_000
        events.append({"kind": "api", "name": "cudaLaunchKernel", "tid": 4242, "stream": None, "start_ns": t0,
                       "dur_ns": 7_000, "correlation": 100 + k})
        events.append({"kind": "kernel", "name": "vectorized_elementwise_kernel", "tid": None, "stream": 7, "device": 0,
                       "start_ns": t0 + 20_000, "dur_ns": 2_000 + 1_000 * k, "correlation": 100 + k})
    events.append({"kind": "memcpy", "name": "DtoH", "tid": None, "stream": 7, "device": 0, "start_ns": 1_700_000,
                   "dur_ns": 1_500, "correlation": 200})
    events.append({"kind": "api", "name": "cudaMemcpyAsync", "tid": 4242, "stream": None, "start_ns": 1_690_000,
                   "dur_ns": 6_000, "correlation": 200})
    return events
