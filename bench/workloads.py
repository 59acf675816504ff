"""GPU workloads for bench/gpu_overhead.py, one process each, side by side with and without profilers.

    python bench/workloads.py NAME STEPS [--torch-profiler cuda|stacks] [--trace-out FILE]
    python bench/workloads.py NAME 0 --marks

Warms up, prints "ready <pid>", waits for a line on stdin, runs STEPS timed steps, prints
"result <steps per second> <export seconds> <steps in each whole second, comma-separated>" and waits for
stdin to close (the rate second by second shows a profiler whose cost grows over a capture: issue #31).
With --torch-profiler the timed steps run under torch.profiler (CPU + CUDA activities; "stacks" adds
with_stack=True) and the trace is exported at the end (export time reported separately, not in the step rate).

With --marks (for bench/continuous_overhead.py --alternate) STEPS is ignored: after "ready <pid>" and the
"go" line the process runs steps until stdin closes, and answers each "mark" line on stdin with
"mark <steps done> <time.perf_counter()> <when the last of those steps ended>", so that the caller times any
stretch of the free-running loop (the steps between two marks over the time between their last steps' ends)
without stopping it. At the end of stdin it finishes the step under way and exits 0. --step-times FILE (with
--marks) writes the end of every step there as it exits.

--profiler-duty PERIOD (with --marks and --step-times, for bench/duty_pairs.py --torch-profiler): the loop
itself starts torch.profiler (CPU + CUDA) for the first half of every PERIOD seconds and stops it for the
second, between steps, and writes each switch (when it began and ended, time.monotonic()) to --switches FILE
as it exits, one JSON line each in the shape of the daemon's "GPU probes switched" log line, so that
torch.profiler's steady cost is paired like deepctx's. A stop's trace processing is in its switch, not in a
stretch. Each profiled stretch's events are dropped with its profiler.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def launch_bound() -> Callable[[], None]:
    import torch

    x = torch.ones(256, device="cuda")

    def step() -> None:
        y = x
        for _ in range(100):  # 100 tiny elementwise kernels per step
            y = y * 1.0001
        torch.cuda.synchronize()

    return step


def launch_backward() -> Callable[[], None]:
    """The launch-bound loop with autograd: 50 tiny elementwise ops forward (one autograd node each), then
    backward, whose ~100 tiny kernels the autograd device thread launches."""
    import torch

    x = torch.ones(256, device="cuda", requires_grad=True)

    def step() -> None:
        y = x
        for _ in range(50):
            y = y * 1.0001
        y.sum().backward()
        x.grad = None
        torch.cuda.synchronize()

    return step


def resnet50() -> Callable[[], None]:
    import torch
    import torchvision

    model = torchvision.models.resnet50().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()

    return step


def gpt2_small() -> Callable[[], None]:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config()).cuda()  # random weights: no download
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (8, 512), device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out = model(ids, labels=ids)
        out.loss.backward()
        opt.step()
        torch.cuda.synchronize()

    return step


def jax_loop() -> Callable[[], None]:
    import jax
    import jax.numpy as jnp

    @jax.jit
    def f(x: jax.Array) -> jax.Array:
        return jnp.tanh(x * 1.0001 + 0.5) - 0.5

    x = jnp.ones((256,), dtype=jnp.float32)

    def step() -> None:
        nonlocal x
        for _ in range(100):
            x = f(x)
        x.block_until_ready()

    return step


def _mock_runtime() -> tuple[Path, Any, Any, Any]:
    """The mock CUDA driver and runtime of tests/mocks (or DEEPCTX_MOCK_LIB), initialized, with one kernel
    registered: (their folder, driver, runtime, the kernel's host stub)."""
    import ctypes

    lib = Path(os.environ.get("DEEPCTX_MOCK_LIB") or Path(__file__).resolve().parents[1] / "tests/mocks/build/lib")
    cu = ctypes.CDLL(str(lib / "libcuda.so.1"))
    rt = ctypes.CDLL(str(lib / "libcudart.so.13"))
    kernels = ctypes.CDLL(str(lib / "libmockkernels.so"))
    stub = ctypes.cast(kernels._Z11mock_matmulPfi, ctypes.c_void_p)
    cu.mockRegisterKernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
    cu.mockRegisterKernel(stub, b"_Z11mock_matmulPfi", 1000)
    cu.cuInit(0)  # the agent, when CUDA_INJECTION64_PATH names it, comes up here
    return lib, cu, rt, stub


def mock_launch() -> Callable[[], None]:
    """No GPU: the launch-bound loop's shape (100 launches and a synchronize a step, from a Python stack about
    20 frames deep) through the mock CUDA runtime and CUPTI of tests/mocks (make -C tests/mocks; another
    folder in DEEPCTX_MOCK_LIB). The mock device costs nothing, so a step's time is the calls' CPU cost, and
    what each way of probing adds per launch shows here on any machine (BENCHMARKS.md: per-launch cost)."""
    import ctypes

    _, cu, rt, stub = _mock_runtime()
    # the driver's launch: one correlation id per launch, as CUPTI gives a runtime launch and the driver
    # call inside it (the mock runtime's driver call would have an id of its own)
    launch, sync = cu.cuLaunchKernel, rt.cudaDeviceSynchronize
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3

    def launches() -> None:
        for _ in range(100):
            launch(stub, 4, 1, 1, 256, 1, 1, 0, None, None, None)
        sync()

    def nested(depth: int) -> None:
        if depth:
            nested(depth - 1)
        else:
            launches()

    return lambda: nested(18)


def mock_launch_deep() -> Callable[[], None]:
    """mock_launch with a deep native stack: the 100 launches go through the mock runtime's cudaLaunchKernel
    from under 40 C frames that keep frame pointers (tests/targets/frames/frames.c; make -C tests/targets),
    as PyTorch's dispatcher under a CPython built with frame pointers puts them: what the native stack
    walk costs per frame shows here."""
    import ctypes

    lib, _, rt, stub = _mock_runtime()
    frames = ctypes.CDLL(str(Path(__file__).resolve().parents[1] / "tests/targets/bin/libframes.so"))
    if frames.frames_init(str(lib / "libcudart.so.13").encode()) != 0:
        raise RuntimeError("libframes.so could not find cudaLaunchKernel in the mock runtime")
    launches, sync = frames.launches_at_depth, rt.cudaDeviceSynchronize
    launches.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]

    def step() -> None:
        launches(40, stub, 100)
        sync()

    return step


def cudart_launch() -> Callable[[], None]:
    """No GPU: 100 cudaLaunchKernel calls a step into the real CUDA runtime (pip's nvidia-cuda-runtime, or
    DEEPCTX_LIBCUDART), from 22 Python frames, the call issue #31 measured on the CI machine. Without a GPU
    each call fails inside the runtime, but its entry and return probes fire as on a GPU host: what a probe
    adds to the call shows against the call alone and against a bare entry+return uprobe
    (gpu_overhead.py's bare_uprobe variant)."""
    import ctypes

    path = os.environ.get("DEEPCTX_LIBCUDART")
    if not path:
        import nvidia

        found = [str(f) for base in nvidia.__path__ for f in sorted(Path(base).glob("cu*/lib/libcudart.so.*"))]
        if not found:
            raise RuntimeError("no libcudart: install pip's nvidia-cuda-runtime or set DEEPCTX_LIBCUDART")
        path = found[0]
    rt = ctypes.CDLL(path)
    stub = ctypes.c_void_p(ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value or 0)
    grid = ctypes.c_uint64(1 | (1 << 32))  # dim3 (1, 1, 1): x and y in one eightbyte, z in the next
    launch = rt.cudaLaunchKernel
    launch.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32,
                       ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    one = ctypes.c_uint32(1)

    def launches() -> None:
        for _ in range(100):
            launch(stub, grid, one, grid, one, None, 0, None)

    def nested(depth: int) -> None:
        if depth:
            nested(depth - 1)
        else:
            launches()

    # <module>, main, run_marked, the step, 17 nested and launches: 22 Python frames (DEEPCTX_BENCH_NESTED
    # sets the 16: how the cost of the Python walk goes with the stack's depth)
    depth = int(os.environ.get("DEEPCTX_BENCH_NESTED", "16"))
    return lambda: nested(depth)


def cpu_witness() -> Callable[[], None]:
    """No GPU, no library deepctx probes: interpreter-bound work beside a measured workload (gpu_overhead.py
    --witness), whose step rate tells how fast the host's CPUs ran in each block."""
    table = {i: i * i for i in range(256)}

    def step() -> None:
        total = 0
        for i in range(2000):
            total += table[i & 255] ^ i

    return step


WORKLOADS = {"launch_bound": launch_bound, "launch_backward": launch_backward, "resnet50": resnet50, "gpt2": gpt2_small, "jax": jax_loop,
             "mock_launch": mock_launch, "mock_launch_deep": mock_launch_deep, "cudart_launch": cudart_launch,
             "cpu_witness": cpu_witness}


class ProfilerDuty:
    """Between steps: torch.profiler on for the first half of each period, off for the second; every
    switch's start and end kept for bench/duty_pairs.py."""

    def __init__(self, period_s: float) -> None:
        self.half = period_s / 2
        self.prof: Any = None
        self.next = time.monotonic() + self.half  # off first: the first stretch is a detached one
        self.switches: list[dict[str, Any]] = []

    def __call__(self, now: float) -> None:
        if now < self.next:
            return
        from torch.profiler import ProfilerActivity, profile

        if self.prof is None:
            self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
            self.prof.start()
        else:
            self.prof.stop()  # processes the stretch's events: part of the switch
            self.prof = None
        ended = time.monotonic()
        self.switches.append({"msg": "GPU probes switched", "pid": os.getpid(), "attached": self.prof is not None,
                              "from_mono": now, "to_mono": ended})
        self.next = ended + self.half

    def write(self, path: str) -> None:
        if self.prof is not None:
            self.prof.stop()
        Path(path).write_text("".join(json.dumps(s) + "\n" for s in self.switches))


def run_marked(step: Callable[[], None], step_times: str | None = None,
               between: Callable[[float], None] | None = None) -> int:
    """Steps until stdin closes; a reader thread answers "mark" with the steps done so far, the time, and
    when the last of those steps ended (a rate between two such ends counts whole steps only: a block of
    55 GPT-2 steps is not one step off). step_times: a file that gets the end of every step, one
    time.monotonic() a line, at the end (bench/duty_pairs.py). between(the step's end): called after each
    step (ProfilerDuty)."""
    ends: list[float] = []
    progress = (0, time.perf_counter())  # (steps done, when the last ended): one assignment, read whole
    stop = False

    def reader() -> None:
        nonlocal stop
        while line := sys.stdin.readline():
            if line.strip() == "mark":
                t = time.perf_counter()
                n, ended = progress
                print(f"mark {n} {t:.6f} {ended:.6f}", flush=True)
        stop = True

    threading.Thread(target=reader, daemon=True).start()
    done = 0
    while not stop:
        step()
        done += 1
        progress = (done, time.perf_counter())
        if step_times or between:
            end = time.monotonic()
            if step_times:
                ends.append(end)
            if between:
                between(end)
    if step_times:
        Path(step_times).write_text("".join(f"{t:.6f}\n" for t in ends))
    return 0


def timed_steps(step: Callable[[], None], n: int) -> tuple[float, list[int]]:
    """Runs n steps: their seconds, and the steps of each whole second (one append a step, under every variant
    alike)."""
    ends: list[float] = []
    t0 = time.perf_counter()
    for _ in range(n):
        step()
        ends.append(time.perf_counter())
    return time.perf_counter() - t0, steps_by_second(t0, ends)


def steps_by_second(t0: float, ends: list[float]) -> list[int]:
    """Steps that ended in each whole second from t0 (the last, partial second left out)."""
    if not ends:
        return []
    counts = [0] * int(ends[-1] - t0)
    for t in ends:
        i = int(t - t0)
        if i < len(counts):
            counts[i] += 1
    return counts


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=sorted(WORKLOADS))
    ap.add_argument("steps", type=int)
    ap.add_argument("--torch-profiler", choices=["cuda", "stacks"])
    ap.add_argument("--trace-out", default=os.devnull)
    ap.add_argument("--marks", action="store_true",
                    help="steps until stdin closes; 'mark' lines answered with the steps done and the time")
    ap.add_argument("--step-times", help="with --marks: write every step's end (time.monotonic()) to this file")
    ap.add_argument("--profiler-duty", type=float, metavar="PERIOD",
                    help="with --marks: torch.profiler on for the first half of every PERIOD seconds")
    ap.add_argument("--switches", help="with --profiler-duty: write the profiler's switches to this file")
    args = ap.parse_args()
    if args.marks and args.torch_profiler:
        ap.error("--marks runs without --torch-profiler (--profiler-duty switches it itself)")
    if args.profiler_duty is not None and not (args.marks and args.switches and args.profiler_duty > 0):
        ap.error("--profiler-duty needs --marks, --switches and a period above 0")
    step = WORKLOADS[args.name]()
    for _ in range(5):
        step()
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    if args.marks:
        duty = ProfilerDuty(args.profiler_duty) if args.profiler_duty else None
        rc = run_marked(step, args.step_times, duty)
        if duty is not None:
            duty.write(args.switches)
        return rc
    export_s = 0.0
    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     with_stack=args.torch_profiler == "stacks") as prof:
            dt, by_second = timed_steps(step, args.steps)
        t1 = time.perf_counter()
        prof.export_chrome_trace(args.trace_out if args.trace_out != os.devnull else f"/tmp/trace-{os.getpid()}.json")
        export_s = time.perf_counter() - t1
    else:
        dt, by_second = timed_steps(step, args.steps)
    shown = ",".join(str(n) for n in by_second) or "-"
    print(f"result {args.steps / dt:.4f} {export_s:.3f} {shown}", flush=True)
    sys.stdin.readline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
