"""The few ptrace(2) requests the injector needs (x86-64), through ctypes: no debugger involved.

Every request for one tracee must come from the thread that seized it: the injector runs start to end
in one thread."""

from __future__ import annotations

import ctypes as ct
import os
import platform

PTRACE_CONT = 7
PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_DETACH = 17
PTRACE_GETREGSET = 0x4204
PTRACE_SETREGSET = 0x4205
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_EVENT_STOP = 128
NT_X86_XSTATE = 0x202
WALL = 0x40000000  # __WALL: wait for threads that are not our children
XSTATE_MAX = 16384  # bytes: more than any XSAVE area (AVX-512 needs about 2.7 KB)

_libc = ct.CDLL(None, use_errno=True)
_libc.ptrace.restype = ct.c_long
_libc.ptrace.argtypes = [ct.c_long, ct.c_long, ct.c_void_p, ct.c_void_p]


class PtraceError(OSError):
    """A ptrace request failed (errno, with the request's name in the message)."""


class UserRegs(ct.Structure):
    """struct user_regs_struct (x86-64, <sys/user.h>)."""

    _fields_ = [(n, ct.c_uint64) for n in (
        "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi", "rdi",
        "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base", "ds", "es", "fs", "gs")]


class _Iovec(ct.Structure):
    _fields_ = [("base", ct.c_void_p), ("len", ct.c_size_t)]


def supported() -> bool:
    return platform.machine() == "x86_64"


def _ptrace(request: int, tid: int, addr: int | None, data: int | ct.c_void_p | None, what: str) -> int:
    r = _libc.ptrace(request, tid, addr, data)
    if r == -1:
        err = ct.get_errno()
        if err:
            raise PtraceError(err, f"ptrace({what}) on thread {tid}: {os.strerror(err)}")
    return int(r)


def seize(tid: int) -> None:
    _ptrace(PTRACE_SEIZE, tid, None, None, "SEIZE")


def interrupt(tid: int) -> None:
    _ptrace(PTRACE_INTERRUPT, tid, None, None, "INTERRUPT")


def cont(tid: int, sig: int = 0) -> None:
    _ptrace(PTRACE_CONT, tid, None, sig, "CONT")


def detach(tid: int, sig: int = 0) -> None:
    _ptrace(PTRACE_DETACH, tid, None, sig, "DETACH")


def get_regs(tid: int) -> UserRegs:
    regs = UserRegs()
    _ptrace(PTRACE_GETREGS, tid, None, ct.addressof(regs), "GETREGS")
    return regs


def set_regs(tid: int, regs: UserRegs) -> None:
    _ptrace(PTRACE_SETREGS, tid, None, ct.addressof(regs), "SETREGS")


def get_xstate(tid: int) -> bytes:
    """The thread's FPU/SSE/AVX state (XSAVE area): what a called function may change."""
    buf = ct.create_string_buffer(XSTATE_MAX)
    iov = _Iovec(ct.cast(buf, ct.c_void_p), XSTATE_MAX)
    _ptrace(PTRACE_GETREGSET, tid, NT_X86_XSTATE, ct.addressof(iov), "GETREGSET")
    return buf.raw[:iov.len]


def set_xstate(tid: int, state: bytes) -> None:
    buf = ct.create_string_buffer(state, len(state))
    iov = _Iovec(ct.cast(buf, ct.c_void_p), len(state))
    _ptrace(PTRACE_SETREGSET, tid, NT_X86_XSTATE, ct.addressof(iov), "SETREGSET")


def wait(tid: int) -> int:
    """Blocks until the tracee changes state; returns the wait status."""
    while True:
        try:
            _, status = os.waitpid(tid, WALL)
            return status
        except InterruptedError:
            continue
