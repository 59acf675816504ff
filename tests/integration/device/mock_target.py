"""Drives the mock CUDA runtime (tests/mocks) at known lines, with kernels of known durations; with --hip,
the mock HIP runtime and rocprofiler-sdk instead (see hip_main).

    python mock_target.py MOCK_LIB_DIR [--no-init] [--hold-cupti] [--auto] [--phases N]
    python mock_target.py MOCK_LIB_DIR --hip [--no-init] [--attach-agent PATH] [--auto] [--phases N]

Prints "ready <pid>"; then N times (default 1): waits for "go" on stdin, runs one phase of work, prints
"cupti <subscribed> <callbacks>" (the mock CUPTI's state: does anyone hold it, how many callbacks ran)
and "done"; then waits for stdin to close. --auto: no handshake, work at once and exit (`deepctx run`). Device times (ns) are
exact by construction of the mocks:
    LINE_MATMUL  cudaLaunchKernel x N_MATMUL  of mock_matmul (named by its host stub), MATMUL_NS each
    LINE_RELU    cuLaunchKernel   x N_RELU    of mock_relu (a bare handle: only CUPTI knows its name)
    LINE_COPY    cudaMemcpy HtoD  x N_COPY    of COPY_BYTES (1 ns per byte)
    LINE_SET     cudaMemset       x N_SET     of SET_BYTES (1 ns per byte)
    LINE_GRAPH   cudaGraphLaunch  x N_GRAPH   of [matmul, relu, matmul]
    LINE_SYNC    cudaDeviceSynchronize x 1
--no-init: CUDA is never initialized before "go" (no context: injection must refuse).
--hold-cupti: subscribes to CUPTI first, as another profiler would (the agent must say CUPTI is held).
--relu-thread: the relus run in a thread of their own (started and joined inside the phase).

    python mock_target.py MOCK_LIB_DIR --steady RATE [--kernel-ns NS]

--steady: after "ready", cudaLaunchKernel of mock_matmul RATE times a second, paced to absolute deadlines
(so the rate holds while probes slow each launch), until a line on stdin; then prints "launched <n>".
--kernel-ns: mock_matmul lasts NS on the device instead of MATMUL_NS (more than 1/RATE keeps it busy).
"""

from __future__ import annotations

import ctypes
import os
import sys

N_MATMUL, N_RELU, N_COPY, N_SET, N_GRAPH = 7, 5, 3, 2, 2
MATMUL_NS, RELU_NS, COPY_BYTES, SET_BYTES = 1500, 700, 4096, 1000
MATMUL_NAME, RELU_NAME = b"_Z11mock_matmulPfi", b"_Z9mock_reluPf"


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def matmuls(rt: ctypes.CDLL, stub: int) -> None:
    for _ in range(N_MATMUL):
        rt.cudaLaunchKernel(ctypes.c_void_p(stub), Dim3(4, 2, 1), Dim3(256, 1, 1), None, ctypes.c_size_t(0),  # LINE_MATMUL
                            None)


def relus(cu: ctypes.CDLL, handle: int) -> None:
    for _ in range(N_RELU):
        cu.cuLaunchKernel(ctypes.c_void_p(handle), 8, 1, 1, 128, 1, 1, 0, None, None, None)  # LINE_RELU


def copies(rt: ctypes.CDLL, host: ctypes.Array) -> None:
    for _ in range(N_COPY):
        rt.cudaMemcpy(None, host, ctypes.c_size_t(COPY_BYTES), 1)  # LINE_COPY


def sets(rt: ctypes.CDLL) -> None:
    for _ in range(N_SET):
        rt.cudaMemset(None, 0, ctypes.c_size_t(SET_BYTES))  # LINE_SET


def graphs(rt: ctypes.CDLL, graph: int) -> None:
    for _ in range(N_GRAPH):
        rt.cudaGraphLaunch(ctypes.c_void_p(graph), None)  # LINE_GRAPH


def hip_matmuls(hip: ctypes.CDLL, stub: int) -> None:
    for _ in range(N_MATMUL):
        hip.hipLaunchKernel(ctypes.c_void_p(stub), Dim3(4, 2, 1), Dim3(256, 1, 1), None, ctypes.c_size_t(0),  # LINE_HIP_MATMUL
                            None)


def hip_relus(hip: ctypes.CDLL, handle: int) -> None:
    for _ in range(N_RELU):
        hip.hipModuleLaunchKernel(ctypes.c_void_p(handle), 8, 1, 1, 128, 1, 1, 0, None, None, None)  # LINE_HIP_RELU


def hip_copies(hip: ctypes.CDLL, host: ctypes.Array) -> None:
    for _ in range(N_COPY):
        hip.hipMemcpy(None, host, ctypes.c_size_t(COPY_BYTES), 1)  # LINE_HIP_COPY


def hip_sets(hip: ctypes.CDLL) -> None:
    for _ in range(N_SET):
        hip.hipMemset(None, 0, ctypes.c_size_t(SET_BYTES))  # LINE_HIP_SET


def steady(rt: ctypes.CDLL, stub: int, rate: float) -> int:
    """Launches at `rate` a second until stdin has a line; how many."""
    import select
    import time

    n, step, next_t = 0, 1.0 / rate, time.monotonic()
    while not select.select([sys.stdin], [], [], max(0.0, next_t - time.monotonic()))[0]:
        rt.cudaLaunchKernel(ctypes.c_void_p(stub), Dim3(4, 2, 1), Dim3(256, 1, 1), None, ctypes.c_size_t(0), None)
        n += 1
        next_t += step
    return n


def attach_agent(path: str) -> str:
    """What deepctxd does at attach, without ptrace: load the agent, call deepctx_agent_attach()."""
    agent = ctypes.CDLL(path)
    rc = agent.deepctx_agent_attach()
    error = ctypes.c_char.in_dll(agent, "deepctx_agent_error")
    return f"attached {rc} {ctypes.string_at(ctypes.addressof(error)).decode()}"


def hip_main() -> None:
    """The same work on the mock HIP runtime (libamdhip64.so.6) under the mock rocprofiler-sdk:
        LINE_HIP_MATMUL hipLaunchKernel       x N_MATMUL of mock_matmul (named by its host stub), MATMUL_NS each
        LINE_HIP_RELU   hipModuleLaunchKernel x N_RELU   of mock_relu (a bare handle: only the SDK names it)
        LINE_HIP_COPY   hipMemcpy HtoD        x N_COPY   of COPY_BYTES (a memory copy record, 1 ns per byte)
        LINE_HIP_SET    hipMemset             x N_SET    of SET_BYTES (the runtime's fill kernel, 1 ns per byte)
        LINE_HIP_SYNC   hipDeviceSynchronize  x 1        (no record: the SDK has none for synchronization)
    Each phase ends with "done <started tracing contexts> <HIP API callbacks>" (the mock SDK's view).
    --no-init: HIP is not initialized before "go". --attach-agent PATH: before "ready", load the agent and
    call deepctx_agent_attach(), before HIP initializes unless --late-attach ("attached <rc> <error>" follows
    "ready")."""
    lib = sys.argv[1]
    sdk = ctypes.CDLL(os.path.join(lib, "librocprofiler-sdk.so.1"))
    hip = ctypes.CDLL(os.path.join(lib, "libamdhip64.so.6"))
    kernels = ctypes.CDLL(os.path.join(lib, "libmockkernels.so"))
    sdk.mockrocp_api_callbacks.restype = ctypes.c_uint64
    agent = sys.argv[sys.argv.index("--attach-agent") + 1] if "--attach-agent" in sys.argv else None
    attached = attach_agent(agent) if agent and "--late-attach" not in sys.argv else ""
    stub = ctypes.cast(kernels._Z11mock_matmulPfi, ctypes.c_void_p).value or 0
    relu_handle = ctypes.create_string_buffer(64)  # a bare handle: no symbol, no name next to it
    relu = ctypes.addressof(relu_handle)
    host = ctypes.create_string_buffer(COPY_BYTES)
    auto = "--auto" in sys.argv
    hip.mockHipRegisterKernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]

    def load_kernels() -> None:  # a code object loads (initializing HIP first)
        hip.mockHipRegisterKernel(stub, MATMUL_NAME, MATMUL_NS)
        hip.mockHipRegisterKernel(relu, RELU_NAME, RELU_NS)

    if "--no-init" not in sys.argv:
        hip.hipInit(0)  # the runtime (and, with ROCP_TOOL_LIBRARIES, the agent) comes up here
        load_kernels()
    if agent and "--late-attach" in sys.argv:
        attached = attach_agent(agent)
    phases = int(sys.argv[sys.argv.index("--phases") + 1]) if "--phases" in sys.argv else 1
    if not auto:
        print(f"ready {os.getpid()}", flush=True)
    if attached:
        print(attached, flush=True)
    for phase in range(phases):
        if not auto:
            sys.stdin.readline()
        if "--no-init" in sys.argv and phase == 0:
            load_kernels()
        hip_matmuls(hip, stub)
        hip_relus(hip, relu)
        hip_copies(hip, host)
        hip_sets(hip)
        hip.hipDeviceSynchronize()  # LINE_HIP_SYNC
        print(f"done {sdk.mockrocp_tracing_contexts()} {sdk.mockrocp_api_callbacks()}", flush=True)
    if not auto:
        sys.stdin.readline()


def main() -> None:
    if "--hip" in sys.argv:
        hip_main()
        return
    lib = sys.argv[1]
    cu = ctypes.CDLL(os.path.join(lib, "libcuda.so.1"))
    rt = ctypes.CDLL(os.path.join(lib, "libcudart.so.13"))
    kernels = ctypes.CDLL(os.path.join(lib, "libmockkernels.so"))
    if "--hold-cupti" in sys.argv:  # another profiler in the process holds CUPTI
        cupti = ctypes.CDLL(os.path.join(lib, "libcupti.so.13"))
        handle = ctypes.c_void_p()
        assert cupti.cuptiSubscribe(ctypes.byref(handle), None, None) == 0
    stub = ctypes.cast(kernels._Z11mock_matmulPfi, ctypes.c_void_p).value or 0
    relu_handle = ctypes.create_string_buffer(64)  # a bare handle: no symbol, no name next to it
    relu = ctypes.addressof(relu_handle)
    cu.mockRegisterKernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
    matmul_ns = int(sys.argv[sys.argv.index("--kernel-ns") + 1]) if "--kernel-ns" in sys.argv else MATMUL_NS
    cu.mockRegisterKernel(stub, MATMUL_NAME, matmul_ns)
    cu.mockRegisterKernel(relu, RELU_NAME, RELU_NS)
    rt.mockGraphCreate.restype = ctypes.c_void_p
    graph = rt.mockGraphCreate((ctypes.c_void_p * 3)(stub, relu, stub), 3)
    host = ctypes.create_string_buffer(COPY_BYTES)
    auto = "--auto" in sys.argv
    late = "--late-init" in sys.argv  # the libraries mapped, CUDA started only on a line from stdin
    if late:
        print(f"ready {os.getpid()}", flush=True)
        sys.stdin.readline()
    if "--no-init" not in sys.argv:
        cu.cuInit(0)  # the CUDA context (and, with CUDA_INJECTION64_PATH, the agent) comes up here
    if late:
        print("initialized", flush=True)
    cupti = ctypes.CDLL(os.path.join(lib, "libcupti.so.13"))
    cupti.mockcupti_callbacks.restype = ctypes.c_uint64
    phases = int(sys.argv[sys.argv.index("--phases") + 1]) if "--phases" in sys.argv else 1
    if not auto and not late:
        print(f"ready {os.getpid()}", flush=True)
    if "--steady" in sys.argv:
        print(f"launched {steady(rt, stub, float(sys.argv[sys.argv.index('--steady') + 1]))}", flush=True)
        return
    for _ in range(phases):
        if not auto:
            sys.stdin.readline()
        matmuls(rt, stub)
        if "--relu-thread" in sys.argv:
            import threading

            t = threading.Thread(target=relus, args=(cu, relu))
            t.start()
            t.join()
        else:
            relus(cu, relu)
        copies(rt, host)
        sets(rt)
        graphs(rt, graph)
        rt.cudaDeviceSynchronize()  # LINE_SYNC
        print(f"cupti {cupti.mockcupti_subscribed()} {cupti.mockcupti_callbacks()} {cupti.mockcupti_finalized()}",
              flush=True)
        if not auto:
            print("done", flush=True)
    if not auto:
        sys.stdin.readline()


if __name__ == "__main__":
    main()
