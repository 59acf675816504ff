"""C++ name demangling through the C++ runtime's own __cxa_demangle (no external tool, native speed)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

_lib: ctypes.CDLL | None = None
_libc: ctypes.CDLL | None = None


def _load() -> ctypes.CDLL | None:
    global _lib, _libc
    if _lib is None:
        for name in ("libstdc++.so.6", ctypes.util.find_library("stdc++"), "libc++.so.1"):
            if not name:
                continue
            try:
                _lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if _lib is not None:
            _lib.__cxa_demangle.restype = ctypes.c_void_p
            _lib.__cxa_demangle.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                                            ctypes.POINTER(ctypes.c_int)]
            _libc = ctypes.CDLL("libc.so.6")
            _libc.free.argtypes = [ctypes.c_void_p]
    return _lib


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    """The demangled C++ name, or the name unchanged when it is not a mangled C++ name."""
    if not name.startswith("_Z"):
        return name
    lib = _load()
    if lib is None:
        return name
    status = ctypes.c_int(0)
    ptr = lib.__cxa_demangle(name.encode(), None, None, ctypes.byref(status))
    if status.value != 0 or not ptr:
        return name
    try:
        return ctypes.string_at(ptr).decode(errors="replace")
    finally:
        assert _libc is not None
        _libc.free(ptr)


def type_display_name(mangled: str) -> str:
    """The class name of a C++ type from its type_info name: 'N5torch8autograd9generated14AddmmBackward0E'
    -> 'AddmmBackward0' (namespaces dropped; template arguments kept)."""
    if not mangled:
        return ""
    full = demangle("_ZTS" + mangled).removeprefix("typeinfo name for ")
    if full.startswith("_ZTS"):  # not a mangled type name
        return mangled
    depth, cut = 0, 0
    for i, ch in enumerate(full):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == ":" and depth == 0 and full[i - 1:i + 1] == "::":
            cut = i + 1
    return full[cut:]
