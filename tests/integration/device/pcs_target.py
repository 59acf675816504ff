"""Launches the kernels of tests/fixtures/cubin/pcs_kernels.cu on the mock CUDA driver, whose mock CUPTI
samples PCs as MOCK_PCS_SAMPLES says (tests/mocks/mock_cupti_pcs.c):

    python pcs_target.py MOCK_LIB_DIR AGENT [--run | --auto | --attach [--no-init]]

Loads the agent (so its probes can be attached) and prints "ready <pid>"; on "go" starts CUDA (the agent
starts, the context is created, the fixture's cubin loaded: MOCK_CUBIN), runs N_SAXPY saxpy launches,
prints "half"; on the next "go" N_STRIDED strided_copy launches, prints "done"; then waits for stdin to
close. Under `deepctx run` (the agent comes from CUDA_INJECTION64_PATH): --run starts CUDA before "ready"
(the agent holds it until the capture runs) and runs every launch on one "go"; --auto has no handshake.
--attach (for `deepctx attach --gpu-activity --pc-sampling`, which loads the agent; AGENT is not loaded): starts
CUDA (the context made, the module loaded) and launches N_BEFORE of each kernel before "ready"; then each "go"
runs N_SAXPY saxpy and N_STRIDED strided_copy launches and prints "done", until stdin closes. With --no-init
it never starts CUDA (libcuda loaded, no context) and each "go" prints "done".
"""

from __future__ import annotations

import ctypes
import os
import sys

N_SAXPY, N_STRIDED = 3, 2
N_BEFORE = 4  # --attach: launches of each kernel before the agent comes (none of them sampled)
KERNEL_NS = 2000


def launch(cu: ctypes.CDLL, kernel: int, grid: int, block: int) -> None:
    cu.cuLaunchKernel(ctypes.c_void_p(kernel), grid, 1, 1, block, 1, 1, 0, None, None, None)


def attach_mode(cu: ctypes.CDLL, saxpy: int, strided: int, init: bool) -> None:
    """--attach: CUDA started and the kernels run before the capture; then one round of launches per "go"."""
    if init:
        cu.cuInit(0)
        for _ in range(N_BEFORE):
            launch(cu, saxpy, 64, 256)
            launch(cu, strided, 8, 128)
    print(f"ready {os.getpid()}", flush=True)
    while sys.stdin.readline():
        for _ in range(N_SAXPY if init else 0):
            cu.cuLaunchKernel(ctypes.c_void_p(saxpy), 64, 1, 1, 256, 1, 1, 0, None, None, None)  # LINE_ATTACH_SAXPY
        for _ in range(N_STRIDED if init else 0):
            cu.cuLaunchKernel(ctypes.c_void_p(strided), 8, 1, 1, 128, 1, 1, 0, None, None, None)  # LINE_ATTACH_STRIDED
        print("done", flush=True)


def main() -> None:
    lib, agent = sys.argv[1], sys.argv[2]
    auto, run = "--auto" in sys.argv, "--run" in sys.argv
    cu = ctypes.CDLL(os.path.join(lib, "libcuda.so.1"))
    ctypes.CDLL(os.path.join(lib, "libcudart.so.13"))
    if not auto and not run and "--attach" not in sys.argv:
        ctypes.CDLL(agent)  # mapped before the capture attaches; CUDA starts it on "go"
    handles = ctypes.create_string_buffer(128)  # bare handles: CUPTI alone names the kernels
    saxpy, strided = ctypes.addressof(handles), ctypes.addressof(handles) + 64
    cu.mockRegisterKernel.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
    cu.mockRegisterKernel(saxpy, b"saxpy", KERNEL_NS)
    cu.mockRegisterKernel(strided, b"strided_copy", KERNEL_NS)
    if "--attach" in sys.argv:
        attach_mode(cu, saxpy, strided, init="--no-init" not in sys.argv)
        return
    if run:
        cu.cuInit(0)
    if not auto:
        print(f"ready {os.getpid()}", flush=True)
        sys.stdin.readline()
    cu.cuInit(0)
    for _ in range(N_SAXPY):
        cu.cuLaunchKernel(ctypes.c_void_p(saxpy), 64, 1, 1, 256, 1, 1, 0, None, None, None)  # LINE_SAXPY
    if not auto and not run:
        print("half", flush=True)
        sys.stdin.readline()
    for _ in range(N_STRIDED):
        cu.cuLaunchKernel(ctypes.c_void_p(strided), 8, 1, 1, 128, 1, 1, 0, None, None, None)  # LINE_STRIDED
    if not auto:
        print("done", flush=True)
        sys.stdin.readline()


if __name__ == "__main__":
    main()
