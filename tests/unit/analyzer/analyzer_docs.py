"""Synthetic profile documents for analyzer tests: call paths added one at a time, with the node shapes the
daemon produces (Python frames, operator frames, API nodes with kernel/memcpy/sync children)."""

from __future__ import annotations

from typing import Any

METRICS = ["cpu_samples", "calls", "api_time_ns", "gpu_time_ns", "bytes", "sync_wait_ns"]
TRAIN = "/srv/app/train.py"
TORCH = "/venv/lib/python3.12/site-packages/torch"


def frame(kind: str, name: str, file: str | None = None, line: int | None = None, module: str | None = None,
          **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "name": name, "file": file, "line": line, "module": module, **extra}


def py(name: str, line: int, file: str = TRAIN, module: str | None = "train") -> dict[str, Any]:
    return frame("python", name, file, line, module)


def lib(name: str, line: int, rel: str) -> dict[str, Any]:
    """A frame of an installed package (torch/...)."""
    return frame("python", name, f"{TORCH}/{rel}", line, "torch." + rel.removesuffix(".py").replace("/", "."))


def nat(name: str, module: str = "libtorch_cuda.so") -> dict[str, Any]:
    return frame("native", name, module=module)


def op(name: str) -> dict[str, Any]:
    """PyTorch's CUDA operator wrapper frame, which names the operator."""
    return nat(f"at::(anonymous namespace)::wrapper_CUDA_{name}_Tensor(at::Tensor const&, at::Tensor const&)")


class DocBuilder:
    def __init__(self, pid: int = 100, sample_hz: int = 1000, duration_s: float = 10.0) -> None:
        self.doc: dict[str, Any] = {
            "schema": "deepctx.profile/v1", "pid": pid, "command": "python train.py", "hostname": "test",
            "started_unix": 1_796_000_000.0, "duration_s": duration_s, "ended": "stopped", "sample_hz": sample_hz,
            "mode": "exact", "metrics": list(METRICS), "root": self._node(frame("root", "python train.py")),
            "stats": {}, "warnings": [],
        }
        self.main = [frame("thread", "python3", tid=pid)]

    @staticmethod
    def _node(f: dict[str, Any]) -> dict[str, Any]:
        return {**f, "metrics": dict.fromkeys(METRICS, 0), "children": []}

    def add(self, path: list[dict[str, Any]], **values: int) -> dict[str, Any]:
        node = self.doc["root"]
        for f in path:
            key = {k: v for k, v in f.items()}
            child = next((c for c in node["children"] if all(c.get(k) == v for k, v in key.items())), None)
            if child is None:
                child = self._node(f)
                node["children"].append(child)
            node = child
        for m, v in values.items():
            node["metrics"][m] += v
        return node

    # --- what programs do, at a call path below the main thread -------------------------------------
    def cpu(self, at: list[dict[str, Any]], samples: int, inside: str | None = None) -> None:
        """CPU samples at a Python line; inside: the GPU API function they were taken in."""
        tail = [nat(inside, "libcudart.so.13")] if inside else [nat("_PyEval_EvalFrameDefault", "libpython3.12.so")]
        self.add(self.main + at + tail, cpu_samples=samples)

    def launch(self, at: list[dict[str, Any]], kernel: str, calls: int, api_time_ns: int, gpu_time_ns: int = 0,
               grid: tuple[int, int, int] = (1, 1, 1), block: tuple[int, int, int] = (128, 1, 1),
               operator: str | None = None, api: str = "cudaLaunchKernel", stream: int = 7) -> None:
        path = self.main + at + ([op(operator)] if operator else [])
        self.add(path + [frame("api", api, module="libcudart.so.13"),
                         frame("kernel", kernel, grid=list(grid), block=list(block), shared_mem=0, stream=stream)],
                 calls=calls, api_time_ns=api_time_ns, gpu_time_ns=gpu_time_ns)

    def sync(self, at: list[dict[str, Any]], calls: int, wait_ns: int, api: str = "cudaStreamSynchronize",
             target: str = "stream") -> None:
        self.add(self.main + at + [frame("api", api, module="libcudart.so.13"), frame("sync", target)],
                 calls=calls, api_time_ns=wait_ns, sync_wait_ns=wait_ns)

    def copy(self, at: list[dict[str, Any]], direction: str, calls: int, nbytes: int, api_time_ns: int,
             api: str = "cudaMemcpyAsync", gpu_time_ns: int = 0) -> None:
        self.add(self.main + at + [frame("api", api, module="libcudart.so.13"), frame("memcpy", direction, stream=7)],
                 calls=calls, api_time_ns=api_time_ns, bytes=nbytes, gpu_time_ns=gpu_time_ns)

    def api(self, at: list[dict[str, Any]], api: str, calls: int, api_time_ns: int, nbytes: int = 0,
            module: str = "libcudart.so.13") -> None:
        self.add(self.main + at + [frame("api", api, module=module)], calls=calls, api_time_ns=api_time_ns,
                 bytes=nbytes)

    def trace(self, kind: str, name: str, start_ns: int, dur_ns: int, stream: int = 7, device: int = 0) -> None:
        self.doc.setdefault("trace", []).append(
            {"kind": kind, "name": name, "tid": 0, "device": device, "stream": stream, "start_ns": start_ns,
             "dur_ns": dur_ns, "correlation": len(self.doc.get("trace", [])) + 1})


MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, at::native::AUnaryFunctor"
       "<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, "
       "3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")
TANH = ("void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel_cuda(at::TensorIteratorBase&)::"
        "{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, "
        "2ul> >(int, ...)")
SGEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
