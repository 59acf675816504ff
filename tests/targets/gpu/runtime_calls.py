"""Calls a real GPU runtime library through ctypes, a known number of times at known lines.

    python runtime_calls.py cuda|hip LIBRARY_PATH [--dlopen-late] [--launches N]

Prints "ready <pid>", waits for a line on stdin ("go"), then makes the calls and prints "done".
Without a GPU every call returns an error code; the probes fire on the real entry points anyway.
With --dlopen-late the library is opened only after "go" (then a second "go" starts the calls), so a
profiler attached before must pick it up as it appears.
"""

from __future__ import annotations

import ctypes
import os
import sys

N_MALLOC, N_LAUNCH, N_SYNC, N_MEMCPY, N_HANDLE = 7, 11, 5, 3, 4
FAKE_KERNEL = b"_Z17deepctx_fake_kernPfi"  # deepctx_fake_kern(float*, int)
# a name longer than BPF's copy of it (256 bytes): deepctx_long::...(40 times)::kern()
LONG_KERNEL = b"_ZN" + b"12deepctx_long" * 40 + b"4kernEv"


class FakeHandle(ctypes.Structure):
    """Laid out like the CUDA runtime's launch handle: the device function's name pointer at +8."""

    _fields_ = [("pad", ctypes.c_void_p), ("name", ctypes.c_char_p), ("more", ctypes.c_void_p * 4)]
COPY_BYTES = 4096


def allocate(lib: ctypes.CDLL, prefix: str) -> None:
    ptr = ctypes.c_void_p()
    for _ in range(N_MALLOC):
        getattr(lib, f"{prefix}Malloc")(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))  # LINE_MALLOC


def launch(lib: ctypes.CDLL, prefix: str, stub: int, n: int) -> None:
    grid = ctypes.c_uint64(2 | (3 << 32))  # dim3 (2, 3, 1): x and y in one eightbyte, z in the next
    block = ctypes.c_uint64(128 | (1 << 32))
    for _ in range(n):
        getattr(lib, f"{prefix}LaunchKernel")(ctypes.c_void_p(stub), grid, ctypes.c_uint32(1), block,  # LINE_LAUNCH
                                             ctypes.c_uint32(1), None, ctypes.c_size_t(256), None)


def launch_handle(lib: ctypes.CDLL, prefix: str, handle: FakeHandle) -> None:
    one = ctypes.c_uint64(1 | (1 << 32))
    for _ in range(N_HANDLE):
        getattr(lib, f"{prefix}LaunchKernel")(ctypes.byref(handle), one, ctypes.c_uint32(1), one,  # LINE_HANDLE
                                             ctypes.c_uint32(1), None, ctypes.c_size_t(0), None)


def copy(lib: ctypes.CDLL, prefix: str) -> None:
    host = ctypes.create_string_buffer(COPY_BYTES)
    for _ in range(N_MEMCPY):
        getattr(lib, f"{prefix}Memcpy")(None, host, ctypes.c_size_t(COPY_BYTES), 1)  # 1: HtoD  # LINE_MEMCPY


def synchronize(lib: ctypes.CDLL, prefix: str) -> None:
    for _ in range(N_SYNC):
        getattr(lib, f"{prefix}DeviceSynchronize")()  # LINE_SYNC


def main() -> None:
    prefix, path = sys.argv[1], sys.argv[2]
    late = "--dlopen-late" in sys.argv
    n_launch = int(sys.argv[sys.argv.index("--launches") + 1]) if "--launches" in sys.argv else N_LAUNCH
    lib = None if late else ctypes.CDLL(path)
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    if late:
        lib = ctypes.CDLL(path)
        print("loaded", flush=True)
        sys.stdin.readline()
    assert lib is not None
    # Any address works as a "host stub" without a GPU; this one is a function with a known name.
    stub = ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value or 0
    allocate(lib, prefix)
    launch(lib, prefix, stub, n_launch)
    handle = FakeHandle(None, FAKE_KERNEL)
    launch_handle(lib, prefix, handle)
    long_handle = FakeHandle(None, LONG_KERNEL)
    launch_handle(lib, prefix, long_handle)
    copy(lib, prefix)
    synchronize(lib, prefix)
    print("done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
