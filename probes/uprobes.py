"""Attaching many uprobes at once.

One perf-event uprobe per entry point costs tens of milliseconds to attach through bcc and, worse,
about 100 ms each to detach (every close waits for the kernel to synchronize). The CUDA runtime and
driver alone have over a hundred probed entry points. A BPF uprobe_multi link (Linux 6.6+) attaches
all offsets of one file with one syscall and detaches them with one close, so deepctx uses it where
the kernel has it, and falls back to one perf event per offset otherwise.
"""

from __future__ import annotations

import ctypes as ct
import functools
import os
import platform
import threading
from collections.abc import Iterable, Sequence
from typing import Any

BPF_LINK_CREATE = 28
BPF_TRACE_UPROBE_MULTI = 48
BPF_TRACE_UPROBE_SESSION = 57  # Linux 6.13+: one program at entry and return; the entry's 1 skips the return
BPF_F_UPROBE_MULTI_RETURN = 1
_SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
_libc = ct.CDLL(None, use_errno=True)
SESSIONS_SINCE = (6, 13)  # the release that added BPF_TRACE_UPROBE_SESSION


@functools.cache
def uprobe_sessions() -> bool:
    """The running kernel has uprobe sessions. Asked of the release, not by a load that fails: on older kernels
    (Debian 12's 6.1) that would verify a program for nothing and print bcc's load error at every capture."""
    try:
        release = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return release >= SESSIONS_SINCE


class _UprobeMultiAttr(ct.Structure):
    """union bpf_attr, the link_create member with its uprobe_multi part (include/uapi/linux/bpf.h)."""

    _fields_ = [("prog_fd", ct.c_uint32), ("target_fd", ct.c_uint32), ("attach_type", ct.c_uint32),
                ("flags", ct.c_uint32), ("path", ct.c_uint64), ("offsets", ct.c_uint64),
                ("ref_ctr_offsets", ct.c_uint64), ("cookies", ct.c_uint64), ("cnt", ct.c_uint32),
                ("multi_flags", ct.c_uint32), ("pid", ct.c_uint32), ("pad", ct.c_uint32)]


def link_uprobe_multi(prog_fd: int, path: str, offsets: list[int], retprobe: bool, pid: int = 0,
                      ref_ctr_offsets: list[int] | None = None, attach_type: int = BPF_TRACE_UPROBE_MULTI) -> int:
    """A uprobe_multi link on `offsets` of `path`, for every process (pid 0) or one; returns the link fd.
    ref_ctr_offsets: USDT semaphores (0: none), which the kernel raises in the processes that map the file."""
    n = len(offsets)
    offs = (ct.c_uint64 * n)(*offsets)
    refs = (ct.c_uint64 * n)(*ref_ctr_offsets) if ref_ctr_offsets is not None else None
    cpath = ct.create_string_buffer(os.fsencode(path))
    attr = _UprobeMultiAttr(prog_fd=prog_fd, attach_type=attach_type,
                            path=ct.addressof(cpath), offsets=ct.addressof(offs), cnt=n, pid=pid,
                            ref_ctr_offsets=ct.addressof(refs) if refs is not None else 0,
                            multi_flags=BPF_F_UPROBE_MULTI_RETURN if retprobe else 0)
    fd = _libc.syscall(_SYS_BPF, BPF_LINK_CREATE, ct.byref(attr), ct.sizeof(attr))
    if fd < 0:
        err = ct.get_errno()
        raise OSError(err, f"uprobe_multi link on {path}: {os.strerror(err)}")
    return fd


def close_links(fds: Iterable[int]) -> None:
    """Closes BPF links at once. Each uprobe_multi link's release removes its breakpoints and then waits for
    an RCU grace period (tens of milliseconds; one close after another, a capture's eight to fifteen links
    took 0.6 to 1.1 s on the GPU host); closes from threads of their own wait for their grace periods
    together."""
    fds = list(fds)
    if len(fds) < 2:
        for fd in fds:
            os.close(fd)
        return
    threads = [threading.Thread(target=os.close, args=(fd,), name="deepctx-unlink", daemon=True) for fd in fds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def bcc_attach_uprobe() -> ct._CFuncPtr:  # type: ignore[name-defined]
    """libbcc's bpf_attach_uprobe with its seventh argument, ref_ctr_offset: bcc 0.26's Python binding
    declares six, which leaves the seventh (a semaphore offset the kernel writes to) undefined."""
    fn = ct.CDLL("libbcc.so.0").bpf_attach_uprobe
    fn.restype = ct.c_int
    fn.argtypes = [ct.c_int, ct.c_int, ct.c_char_p, ct.c_char_p, ct.c_uint64, ct.c_int, ct.c_uint32]
    return fn


def load_for_uprobes(bpf: Any, names: list[str], session: list[str] | None = None) -> None:
    """Loads BPF functions as UprobeAttacher and usdt.UsdtAttacher will attach them (uprobe_multi; session:
    uprobe sessions), so the verifier runs when the program is loaded, not at the first attach. Where the
    kernel has no uprobe_multi (or no sessions) nothing more is loaded here: the attach loads them plain."""
    from bcc import BPF

    def load(group: list[str], attach_type: int) -> bool:
        for name in group:
            try:
                bpf.load_func(name.encode(), BPF.KPROBE, attach_type=attach_type)
            except Exception:
                for loaded in group:
                    fn = bpf.funcs.pop(loaded.encode(), None)
                    if fn is not None:
                        os.close(fn.fd)
                return False
        return True

    # where sessions load, they take every offset (UprobeAttacher.attach): the entry and return programs
    # are not needed, and their verification (a second second on a GPU program) is saved
    if not (session and uprobe_sessions() and load(session, BPF_TRACE_UPROBE_SESSION)):
        load(names, BPF_TRACE_UPROBE_MULTI)


class UprobeAttacher:
    """Attaches one BPF entry handler and one return handler at many offsets of library files, in one process
    (pid) or, pid 0, in every process that maps them. A probe set on a file is a breakpoint in every process
    the kernel lets it fire in: with pid 0, each other process that maps the library (the other ranks of a
    job, other jobs from the same environment) traps on every probed call only for the BPF program to
    return, and with one capture per process, as continuous mode runs them, each process traps once per
    capture."""

    def __init__(self, bpf: Any, entry_fn: str, return_fn: str, pid: int = 0, session_fn: str | None = None) -> None:
        """session_fn: one program for entry and return (it tells them apart itself), attached as an uprobe
        session where the kernel has them, in place of entry_fn and return_fn on offsets that want both."""
        self.bpf = bpf
        self.entry_fn = entry_fn
        self.return_fn = return_fn
        self.session_fn = session_fn
        self.pid = pid
        self.multi: bool | None = None  # decided on first use
        self.session: bool | None = None if session_fn and uprobe_sessions() else False  # decided on first use
        self.links: list[int] = []
        self.probes = 0
        self.attached: list[tuple[str, list[int], list[int]]] = []  # (path, returns, entries): for resume()
        self.paused = False

    def _load(self, name: str, attach_type: int) -> int:
        from bcc import BPF

        return self.bpf.load_func(name.encode(), BPF.KPROBE, attach_type=attach_type).fd

    def attach(self, path: str, offsets: Sequence[int], with_return: bool = True,
               entry_only: Sequence[int] = ()) -> None:
        """Entry probes at every offset, and return probes too unless with_return is False; entry_only: more
        offsets probed at entry alone. Under a session program every offset takes the one session link (its
        entry leaves the return alone where none is due); otherwise one entry link takes them all and a
        return link the offsets that want returns."""
        returns = sorted(set(offsets)) if with_return else []
        entries = sorted(set(offsets) | set(entry_only))
        if not entries:
            return
        self.attached.append((path, returns, entries))
        if self.paused:
            return  # attached by resume()
        self._attach(path, returns, entries)

    def _attach(self, path: str, returns: list[int], entries: list[int]) -> None:
        if self.session is not False and self.multi is not False:
            assert self.session_fn is not None
            try:
                fd = self._load(self.session_fn, BPF_TRACE_UPROBE_SESSION)
                self.links.append(link_uprobe_multi(fd, path, entries, retprobe=False, pid=self.pid,
                                                    attach_type=BPF_TRACE_UPROBE_SESSION))
                self.session = self.multi = True
                self.probes += len(entries) + len(returns)
                return
            except Exception:
                if self.session:  # it worked before: this file is the problem
                    raise
                self.session = False  # an older kernel: entry and return probes of their own
                fn = self.bpf.funcs.pop(self.session_fn.encode(), None)
                if fn is not None:
                    os.close(fn.fd)
        if self.multi is not False:
            try:
                entry = self._load(self.entry_fn, BPF_TRACE_UPROBE_MULTI)
                ret = self._load(self.return_fn, BPF_TRACE_UPROBE_MULTI)
                self.links.append(link_uprobe_multi(entry, path, entries, retprobe=False, pid=self.pid))
                if returns:
                    self.links.append(link_uprobe_multi(ret, path, returns, retprobe=True, pid=self.pid))
                self.multi = True
                self.probes += len(entries) + len(returns)
                return
            except Exception:
                if self.multi:  # it worked before: this file is the problem
                    raise
                self.multi = False
                for name in (self.entry_fn, self.return_fn):  # loaded for uprobe_multi: load again plain
                    fn = self.bpf.funcs.pop(name.encode(), None)
                    if fn is not None:
                        os.close(fn.fd)
        for off in entries:
            self._attach_one(path, off, retprobe=False)
            self.probes += 1
        for off in returns:
            self._attach_one(path, off, retprobe=True)
            self.probes += 1

    def _attach_one(self, path: str, offset: int, retprobe: bool) -> None:
        from bcc import BPF

        fn = self.bpf.load_func((self.return_fn if retprobe else self.entry_fn).encode(), BPF.KPROBE)
        pid = self.pid or -1  # perf_event_open's "any process"
        ev = self.bpf._get_uprobe_evname(b"r" if retprobe else b"p", os.fsencode(path), offset, pid)
        fd = bcc_attach_uprobe()(fn.fd, 1 if retprobe else 0, ev, os.fsencode(path), offset, pid, 0)
        if fd < 0:
            raise OSError(f"cannot attach a uprobe at {path}+{offset:#x}")
        self.bpf._add_uprobe_fd(ev, fd)  # bcc closes it in cleanup()

    def close(self) -> None:
        close_links(self.links)
        self.links.clear()

    @property
    def can_pause(self) -> bool:
        """Pausing closes uprobe_multi links; probes attached one by one stay until bcc's cleanup."""
        return self.multi is True

    def pause(self) -> None:
        """Detaches every probe; resume() attaches them again (what was attached meanwhile included)."""
        if self.can_pause and not self.paused:
            self.close()
            self.paused = True

    def resume(self) -> None:
        if not self.paused:
            return
        self.paused = False
        calls, self.attached, self.probes = self.attached, [], 0
        for path, returns, entries in calls:
            self.attached.append((path, returns, entries))
            self._attach(path, returns, entries)
