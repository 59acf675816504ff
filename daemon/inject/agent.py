"""Loading the CUPTI agent into a running process (`deepctx attach PID --gpu-activity`).

A thread of the target is borrowed through ptrace (remote.py) to create a memfd, which the daemon fills
with the agent and seals (memfd.py), and to dlopen it through /proc/self/fd; then to call the agent's
deepctx_agent_attach(), which checks for a CUDA context and subscribes to CUPTI in a thread of its own
(the borrowed thread may hold locks CUDA needs) and reports the outcome. Nothing is written into the
target's filesystem, and the process is bound by its pidfd (ProcessHandle) from the check to the seize.
Refusals come before anything is done to the target where they can: ptrace not permitted, CUDA not
loaded. Every path puts the borrowed thread back as it was."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from deepctx.daemon.errors import FailedPrecondition
from deepctx.daemon.inject import memfd, ptrace
from deepctx.daemon.inject.remote import NotTheProcess, RemoteError, RemoteThread, as_int32
from deepctx.host import procfs
from deepctx.host.elf.image import ElfImage
from deepctx.host.elf.symbols import ElfSymbols
from deepctx.host.gpu_agents import AGENT_NAME
from deepctx.host.process_handle import ProcessHandle

RTLD_NOW = 0x2
RTLD_GLOBAL = 0x100
RTLD_DLOPEN = 0x80000000  # __libc_dlopen_mode's flag for a dlopen-like call
DEV_AGENT_E_PENDING = -5
# Blocking system calls: a thread waiting in one holds no lock that dlopen could need.
_BLOCKING = {0, 7, 23, 35, 43, 45, 47, 61, 202, 230, 232, 270, 271, 281, 288, 441}
_MESSAGES = {
    -1: "the process has no CUDA context yet (attach again once it has started using the GPU)",
    -2: "CUPTI (libcupti) could not be loaded in the process",
    -3: "CUPTI is held by another profiler in the process (one CUPTI subscriber at a time); "
        "device activity needs it",
    -4: "a CUPTI call failed in the process",
}


def _ptrace_refusal(pid: int) -> str | None:
    """Why ptrace will be refused, known without trying: a tracer already there, Yama's scope 3."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("TracerPid:") and int(line.split()[1]) != 0:
                return (f"ptrace is not permitted: process {pid} is already traced by process {line.split()[1]} "
                        f"(a debugger or another profiler); one tracer at a time")
    except OSError:
        return None
    try:
        scope = int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        scope = 0
    if scope >= 3:
        return "ptrace is not permitted on this host (kernel.yama.ptrace_scope = 3)"
    return None


def check_injectable(pid: int) -> None:
    """Raises ValueError with the reason when the agent cannot be loaded into pid."""
    if not ptrace.supported():
        raise ValueError("loading the CUPTI agent into a running process is supported on x86-64 only")
    maps = procfs.read_maps(pid)
    if not any(os.path.basename(m.path).startswith("libcuda.so") for m in maps if m.file_backed):
        raise ValueError("the process has no CUDA context yet (libcuda is not loaded): attach again once it "
                         "has started using the GPU, or start it with `deepctx run`")
    reason = _ptrace_refusal(pid)
    if reason:
        raise ValueError(reason)


def _symbol_address(pid: int, maps: list[procfs.Mapping], match: Callable[[str], bool],
                    names: set[str]) -> dict[str, int]:
    """Run-time addresses of functions of the first mapped file whose basename `match`es."""
    for m in maps:
        if not (m.file_backed and m.executable and match(os.path.basename(m.path))):
            continue
        out = _addresses_in([mm for mm in maps if mm.inode == m.inode and mm.dev == m.dev],
                            procfs.open_mapped_file(pid, m), names)
        if out:
            return out
    return {}


def _addresses_in(same: list[procfs.Mapping], file: str, names: set[str]) -> dict[str, int]:
    """Run-time addresses of functions `names` of `file`, mapped as the mappings `same`."""
    elf = ElfSymbols(file)
    try:
        found = elf.addresses_of(names)
    finally:
        elf.close()  # now: a descriptor of it would stay open until the garbage collector ran
    out = {}
    for name, vaddr in found.items():
        for seg in elf.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                off = vaddr - seg.vaddr + seg.offset
                for mm in same:
                    if mm.offset <= off < mm.offset + (mm.end - mm.start):
                        out[name] = mm.start + off - mm.offset
    return out


def _data_address(pid: int, maps: list[procfs.Mapping], path_in_target: str, name: str) -> int | None:
    """Run-time address of a data symbol (deepctx_agent_state, deepctx_agent_error) of the agent mapped
    as path_in_target."""
    ms = [m for m in maps if m.file_backed and m.path == path_in_target]
    return _data_address_in(ms, procfs.open_mapped_file(pid, ms[0]), name) if ms else None


def _data_address_in(ms: list[procfs.Mapping], file: str, name: str) -> int | None:
    """Run-time address of data symbol `name` of `file`, mapped as the mappings ms."""
    if not ms:
        return None
    with ElfImage(file) as elf:
        sym = elf.symbol(name)
        if sym is None:
            return None
        base = min(m.start - m.offset for m in ms)  # load bias: p_vaddr 0 maps at offset 0
        first = elf.segments[0]
        return base + sym[0] - (first.vaddr - first.offset)


def choose_thread(pid: int) -> int:
    """A thread blocked in a waiting system call (it holds no loader or allocator lock), the main
    thread first; else the main thread."""
    candidates = []
    for tid in procfs.thread_ids(pid):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            state = stat.rsplit(")", 1)[1].split()[0]
            nr = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()[0]
        except (OSError, IndexError):
            continue
        if state == "S" and nr.lstrip("-").isdigit() and int(nr) in _BLOCKING:
            candidates.append(tid)
    if pid in candidates:
        return pid
    return min(candidates) if candidates else pid


# The agent is loaded through /proc/self/fd/N: a process whose root has no /proc cannot open it.
_NO_PROC_HINT = (" (the process's root has no /proc, as in a bare chroot: the agent is loaded through "
                 "/proc/self/fd, so mount /proc there)")


def _libc_functions(pid: int, maps: list[procfs.Mapping]) -> dict[str, int]:
    """The target's dlopen (or __libc_dlopen_mode), dlerror, memfd_create (or syscall) and close."""
    libc = _symbol_address(pid, maps, lambda b: b.startswith("libc.so") or b.startswith("libc-"),
                           {"dlopen", "dlerror", "__libc_dlopen_mode", "memfd_create", "syscall", "close"})
    if "dlopen" not in libc:  # glibc before 2.34: dlopen lives in libdl, when loaded
        libc.update(_symbol_address(pid, maps, lambda b: b.startswith("libdl.so"), {"dlopen", "dlerror"}))
    if "dlopen" not in libc and "__libc_dlopen_mode" not in libc:
        raise FailedPrecondition(f"cannot find dlopen in process {pid} (not a glibc process?)")
    if "close" not in libc or ("memfd_create" not in libc and "syscall" not in libc):
        raise FailedPrecondition(f"cannot find memfd_create in process {pid} (not a glibc process?)")
    return libc


def _memfd_in_target(rt: RemoteThread, libc: dict[str, int]) -> int:
    """A new memfd named after the agent, created by the target: its descriptor number there."""
    name = rt.push_string(AGENT_NAME)  # /proc/PID/maps shows /memfd:libdeepctx_cupti.so (deleted)
    flags = memfd.MFD_CLOEXEC | memfd.MFD_ALLOW_SEALING
    if "memfd_create" in libc:  # glibc 2.27+
        tfd = as_int32(rt.call(libc["memfd_create"], name, flags))
    else:
        tfd = as_int32(rt.call(libc["syscall"], memfd.SYS_MEMFD_CREATE, name, flags))
    if tfd < 0:
        raise FailedPrecondition(f"process {rt.pid} could not create a memory file for the CUPTI agent "
                                 f"(memfd_create failed: a seccomp filter or an old kernel?)")
    return tfd


def _seal_agent(handle: ProcessHandle, tfd: int, data: bytes) -> memfd.SealedAgent:
    """The daemon's own sealed duplicate of the target's memfd tfd, holding exactly data."""
    try:
        fd = memfd.pidfd_getfd(handle.pidfd, tfd)
    except OSError as e:
        raise FailedPrecondition(f"the CUPTI agent could not be handed to process {handle.pid}: {e.strerror}") from e
    try:
        return memfd.fill_and_seal(fd, data)
    except memfd.Refused as e:
        os.close(fd)
        raise FailedPrecondition(f"the CUPTI agent was not loaded into process {handle.pid}: {e}") from e
    except BaseException:
        os.close(fd)
        raise


def inject_agent(handle: ProcessHandle, agent: str, before_load: Callable[[str], None] | None = None,
                 after_load: Callable[[str], None] | None = None, wait_s: float = 30.0) -> memfd.SealedAgent:
    """Loads `agent` into the process of `handle` and starts it; returns the daemon's own sealed
    descriptor of the file loaded (the caller closes it when its probes are gone). The target creates a
    memfd, the daemon fills and seals it (memfd.py), the target dlopens /proc/self/fd/N: nothing is
    written into the target's filesystem and no path it controls is followed. before_load(host_path)
    runs before dlopen (attach the probes), after_load(host_path) right after it (register the probe
    sites); host_path is the daemon's descriptor's path, the target's mappings of it are found by its
    (dev, inode). Raises FailedPrecondition with a sentence for the user; the target keeps running in
    every case."""
    pid = handle.pid
    try:
        check_injectable(pid)
    except ValueError as e:
        raise FailedPrecondition(str(e)) from e
    except procfs.ProcessGone as e:
        raise FailedPrecondition(f"process {pid} exited") from e
    data = Path(agent).read_bytes()
    tid = choose_thread(pid)
    sealed: memfd.SealedAgent | None = None
    try:
        with RemoteThread(pid, tid, handle=handle) as rt:  # pid and tid bound to handle from here on
            libc = _libc_functions(pid, procfs.read_maps(pid))
            tfd = _memfd_in_target(rt, libc)
            try:
                sealed = _seal_agent(handle, tfd, data)
                if before_load:
                    before_load(sealed.path)
                where = rt.push_string(f"/proc/self/fd/{tfd}")
                if "dlopen" in libc:
                    loaded = rt.call(libc["dlopen"], where, RTLD_NOW | RTLD_GLOBAL)
                else:
                    loaded = rt.call(libc["__libc_dlopen_mode"], where, RTLD_NOW | RTLD_GLOBAL | RTLD_DLOPEN)
                if loaded == 0:
                    msg = rt.read_cstring(rt.call(libc["dlerror"])) if "dlerror" in libc else "unknown error"
                    raise FailedPrecondition(f"the target could not load the CUPTI agent: {msg}" + _NO_PROC_HINT
                                             * (f"/proc/self/fd/{tfd}: cannot open" in msg))
            finally:  # the mapping keeps the file; the descriptor would only leak into the target
                with contextlib.suppress(RemoteError, ptrace.PtraceError):  # (gone with a thread lost)
                    rt.call(libc["close"], tfd)
            maps = procfs.read_maps(pid)
            if after_load:
                after_load(sealed.path)
            ms = _agent_maps(maps, sealed)
            attach = _addresses_in(ms, sealed.path, {"deepctx_agent_attach"}) if ms else {}
            if "deepctx_agent_attach" not in attach:
                raise FailedPrecondition(f"process {pid} did not map the CUPTI agent it was given "
                                         f"(or it has no deepctx_agent_attach)")
            rc = as_int32(rt.call(attach["deepctx_agent_attach"]))
        ms = _agent_maps(procfs.read_maps(pid), sealed)
        if rc == DEV_AGENT_E_PENDING:  # the agent's own thread is still starting: follow its state
            rc = _wait_state(handle, ms, sealed.path, wait_s)
        if rc < 0:
            detail = _read_agent_string(handle, ms, sealed.path, "deepctx_agent_error")
            msg = _MESSAGES.get(rc, f"the agent failed to start (code {rc})")
            raise FailedPrecondition(f"{msg}" + (f" ({detail})" if detail else ""))
        return sealed
    except BaseException as e:
        if sealed is not None:
            sealed.close()
        if isinstance(e, procfs.ProcessGone):
            raise FailedPrecondition(f"process {pid} exited") from e
        if isinstance(e, NotTheProcess):
            raise FailedPrecondition(f"process {pid} is not the process checked ({e}): nothing was loaded") from e
        if isinstance(e, ptrace.PtraceError):
            reason = _ptrace_refusal(pid) or f"ptrace is not permitted on process {pid}: {os.strerror(e.errno or 1)}"
            raise FailedPrecondition(reason) from e
        if isinstance(e, RemoteError):
            raise FailedPrecondition(f"loading the CUPTI agent failed: {e}") from e
        raise


def _agent_maps(maps: list[procfs.Mapping], sealed: memfd.SealedAgent) -> list[procfs.Mapping]:
    """The target's mappings of the sealed agent file, by (dev, inode): not by a name it could choose."""
    return [m for m in maps if m.inode == sealed.st_ino and m.dev == sealed.maps_dev]


def agent_state(pid: int, maps: list[procfs.Mapping], path: str) -> int | None:
    """The agent's deepctx_agent_state in the live process (DEV_AGENT_*; None when unreadable): an
    agent that failed at cuInit never runs its watcher, so no status probe says so."""
    addr = _data_address(pid, maps, path, "deepctx_agent_state")
    if addr is None:
        return None
    try:
        with procfs.ProcessMemory(pid) as mem:
            return int.from_bytes(mem.read(addr, 4), "little", signed=True)
    except (procfs.ProcessGone, MemoryError, OSError):
        return None


def agent_error(pid: int, maps: list[procfs.Mapping], path: str) -> str:
    """The agent's deepctx_agent_error in the live process: why it failed, in its words ("" when unreadable or
    empty). The process wrote it: only printable characters are kept, at most 255 of them."""
    addr = _data_address(pid, maps, path, "deepctx_agent_error")
    if addr is None:
        return ""
    try:
        with procfs.ProcessMemory(pid) as mem:
            raw = mem.read_cstring(addr, 256).decode(errors="replace")
    except (procfs.ProcessGone, MemoryError, OSError):
        return ""
    return "".join(c for c in raw if c.isprintable())[:255]


def _wait_state(handle: ProcessHandle, ms: list[procfs.Mapping], file: str, wait_s: float) -> int:
    addr = _data_address_in(ms, file, "deepctx_agent_state")
    if addr is None:
        return DEV_AGENT_E_PENDING
    deadline = time.monotonic() + wait_s
    with procfs.ProcessMemory(handle.pid) as mem:
        handle.ensure()  # the memory opened by number is the bound process's
        while time.monotonic() < deadline:
            state = int.from_bytes(mem.read(addr, 4), "little", signed=True)
            if state != 0:
                return state if state < 0 else 0
            time.sleep(0.01)  # the agent's thread reports through this variable, with a deadline
    raise FailedPrecondition(f"the CUPTI agent did not start within {wait_s:g} s in process {handle.pid}")


def _read_agent_string(handle: ProcessHandle, ms: list[procfs.Mapping], file: str, name: str) -> str:
    addr = _data_address_in(ms, file, name)
    if addr is None:
        return ""
    try:
        with procfs.ProcessMemory(handle.pid) as mem:
            handle.ensure()
            return mem.read_cstring(addr, 256).decode(errors="replace")
    except (procfs.ProcessGone, MemoryError):
        return ""
