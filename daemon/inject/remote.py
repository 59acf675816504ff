"""Calling a function inside another process: one of its threads, borrowed through ptrace.

The thread is stopped (PTRACE_SEIZE + PTRACE_INTERRUPT), its registers and vector state saved, and for
each call its registers are set as the x86-64 SysV ABI wants them at a function's entry, with a return
address of 0: when the function returns, the thread faults at address 0, the fault stops it, and the
return value is in rax. At the end, the saved state is put back and the thread released; a system call
it was blocked in restarts as after any signal (orig_rax is -1 during the calls, so the kernel does not
restart it in the middle of them)."""

from __future__ import annotations

import ctypes as ct
import os
import signal
import time

from deepctx.daemon.inject import ptrace
from deepctx.host.process_handle import ProcessHandle

RETURN_ADDRESS = 0
RED_ZONE = 128
SCRATCH = 4096  # bytes of the thread's stack below its red zone, for strings and arguments


class RemoteError(Exception):
    """The call went wrong in the target (a fault, the process exiting, a timeout)."""


class TargetExited(RemoteError):
    pass


class NotTheProcess(RemoteError):
    """The thread seized is not (or no longer) a thread of the bound process: its number was reused."""


def _stopped(status: int) -> tuple[bool, int, int]:
    """(stopped?, signal, ptrace event) of a wait status."""
    if os.WIFSTOPPED(status):
        return True, os.WSTOPSIG(status), (status >> 16) & 0xFFFF
    return False, 0, 0


class RemoteThread:
    """One thread of a process, borrowed for function calls. Use as a context manager: leaving it puts
    the thread back as it was, whatever happened."""

    def __init__(self, pid: int, tid: int, timeout_s: float = 60.0, handle: ProcessHandle | None = None) -> None:
        """handle: the process pid must still be; checked right before the seize (its start time) and
        right after it (tid is one of its threads): a seized thread cannot be reaped and its number
        reused while we hold it, so every later access by number reaches that process."""
        self.pid = pid
        self.tid = tid
        self.timeout_s = timeout_s
        self._held = False
        self._pending_signal = 0
        self._mem = -1
        # what release() puts back: None until saved (a failure in between restores only what was saved)
        self.saved: ptrace.UserRegs | None = None
        self.xstate: bytes | None = None
        if handle is not None:
            handle.ensure()  # ProcessGone: pid names another process now (or none)
        ptrace.seize(tid)
        self._held = True
        try:
            ptrace.interrupt(tid)
            self._wait_for_stop()  # a seized thread is detached only from a stop: stop it even if foreign
            if handle is not None and not handle.owns_thread(tid):
                raise NotTheProcess(f"thread {tid} is not a thread of process {pid} (it exited and its number "
                                    f"was reused)")
            saved = self.saved = ptrace.get_regs(tid)
            self.xstate = ptrace.get_xstate(tid)
            self._mem = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        except BaseException:
            self.release()
            raise
        self._top = (saved.rsp - RED_ZONE - SCRATCH) & ~0xF  # scratch area grows up from here
        self._used = 0

    def _wait(self) -> int:
        deadline = time.monotonic() + self.timeout_s
        while True:
            tid, status = os.waitpid(self.tid, os.WNOHANG | ptrace.WALL)
            if tid == self.tid:
                return status
            if time.monotonic() > deadline:
                raise RemoteError(f"thread {self.tid} of process {self.pid} did not return from the call "
                                  f"within {self.timeout_s:g} s")
            time.sleep(0.001)  # waiting on the target's thread, with a deadline

    def _next_stop(self, exited: str) -> tuple[int, int]:
        """Waits for the thread's next stop: (signal, ptrace event). If the process exited instead, the
        thread is no longer held and TargetExited(exited) is raised."""
        stopped, sig, event = _stopped(self._wait())
        if not stopped:
            self._held = False
            raise TargetExited(exited)
        return sig, event

    def _wait_for_stop(self) -> None:
        """Waits for the interrupt's stop; a signal arriving first is kept to be delivered at release."""
        while True:
            sig, event = self._next_stop(f"process {self.pid} exited")
            if event == ptrace.PTRACE_EVENT_STOP:
                return
            self._pending_signal = sig  # signal-delivery stop: hold it, the interrupt stop follows
            ptrace.cont(self.tid, 0)

    def write(self, addr: int, data: bytes) -> None:
        if os.pwrite(self._mem, data, addr) != len(data):
            raise RemoteError(f"short write at {addr:#x} in process {self.pid}")

    def read(self, addr: int, size: int) -> bytes:
        return os.pread(self._mem, size, addr)

    def read_cstring(self, addr: int, limit: int = 1024) -> str:
        data = self.read(addr, limit)
        return data.split(b"\0", 1)[0].decode(errors="replace")

    def push(self, data: bytes) -> int:
        """Copies data into the scratch area below the thread's stack; returns its address."""
        size = (len(data) + 15) & ~15
        if self._used + size > SCRATCH - 64:
            raise RemoteError("scratch space exhausted")
        addr = self._top + self._used
        self.write(addr, data)
        self._used += size
        return addr

    def push_string(self, s: str) -> int:
        return self.push(os.fsencode(s) + b"\0")

    def call(self, fn: int, *args: int) -> int:
        """Calls fn(*args) (up to six integer or pointer arguments) in the thread; returns rax."""
        if len(args) > 6:
            raise ValueError("at most six arguments")
        regs = ptrace.UserRegs.from_buffer_copy(self.saved)
        sp = self._top - 256  # below the scratch area, 16-byte aligned
        sp -= 8  # the return address: rsp % 16 == 8 at entry, as after a call instruction
        self.write(sp, RETURN_ADDRESS.to_bytes(8, "little"))
        regs.rsp = sp
        regs.rip = fn
        regs.rax = 0  # no vector arguments (variadic functions read al)
        regs.orig_rax = (1 << 64) - 1  # -1: not in a system call, nothing to restart
        for name, value in zip(("rdi", "rsi", "rdx", "rcx", "r8", "r9"), args, strict=False):
            setattr(regs, name, value & ((1 << 64) - 1))
        ptrace.set_regs(self.tid, regs)
        ptrace.cont(self.tid, 0)
        while True:
            sig, event = self._next_stop(f"process {self.pid} exited during the call")
            if event == ptrace.PTRACE_EVENT_STOP:  # group stop (SIGSTOP from someone): carry on
                ptrace.cont(self.tid, 0)
                continue
            if sig == signal.SIGSEGV:
                now = ptrace.get_regs(self.tid)
                if now.rip == RETURN_ADDRESS:
                    return int(now.rax)
                raise RemoteError(f"the call faulted at {now.rip:#x} in process {self.pid}")
            ptrace.cont(self.tid, sig)  # the application's own signal: its handler runs, then the call goes on

    def release(self) -> None:
        """Puts the saved registers and vector state back and lets the thread go."""
        if self._mem >= 0:
            os.close(self._mem)
            self._mem = -1
        if not self._held:
            return
        self._held = False
        try:
            try:
                if self.saved is not None:
                    ptrace.set_regs(self.tid, self.saved)
                if self.xstate is not None:
                    ptrace.set_xstate(self.tid, self.xstate)
            finally:  # even if the state could not be put back: a thread left stopped hangs its process
                ptrace.detach(self.tid, self._pending_signal)
        except ptrace.PtraceError as e:
            if e.errno != 3:  # ESRCH: the process is gone
                raise

    def __enter__(self) -> RemoteThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def as_int32(v: int) -> int:
    """A C int returned in rax (its low 32 bits, signed)."""
    return ct.c_int32(v & 0xFFFFFFFF).value
