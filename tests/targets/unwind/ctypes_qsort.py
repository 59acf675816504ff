"""Python code called back from C: libc's qsort (through ctypes and libffi) calls a Python comparator
that burns CPU. Prints "ready" once set up, then sorts until killed (or 120 s pass)."""

import ctypes
import ctypes.util
import time

libc = ctypes.CDLL(ctypes.util.find_library("c"))
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def burn(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def py_cmp(x, y):
    burn(300)
    return x[0] - y[0]


cmp = CMP(py_cmp)
values = (ctypes.c_int * 32)()
print("ready", flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    for i in range(32):
        values[i] = (i * 7919) % 32
    libc.qsort(values, 32, ctypes.sizeof(ctypes.c_int), cmp)
