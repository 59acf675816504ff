"""libc qsort calling back into Python: Python frames above native frames above Python frames."""

import ctypes
import ctypes.util

from _common import native_id, ready, running

libc = ctypes.CDLL(ctypes.util.find_library("c"))
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def compare(a, b):
    x = 0
    for _ in range(2000):  # compare-loop
        x += 1  # compare-loop
    return a[0] - b[0]


def sort_numbers():
    values = (ctypes.c_int * 64)(*range(64, 0, -1))
    libc.qsort(values, len(values), ctypes.sizeof(ctypes.c_int), CMP(compare))  # qsort-call


ready(tid=native_id())
while running():
    sort_numbers()
