"""Reading facts about a process from /proc: identity, memory maps, memory, threads."""

from __future__ import annotations

import bisect
import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class ProcessGone(Exception):
    """The process exited (or never existed) while we were reading it."""


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    dev: str  # "major:minor" in hex, as /proc/<pid>/maps prints it
    inode: int
    path: str  # "" for anonymous mappings, "[vdso]" etc. for special ones

    @property
    def executable(self) -> bool:
        return "x" in self.perms

    @property
    def file_backed(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")

    @property
    def file_key(self) -> tuple[str, int]:
        """Identifies the file on disk: a library shared by ten processes has one key."""
        return (self.dev, self.inode)

    @property
    def deleted(self) -> bool:
        return self.path.endswith(" (deleted)")


def parse_maps(text: str) -> list[Mapping]:
    out: list[Mapping] = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        lo, hi = parts[0].split("-")
        out.append(
            Mapping(
                start=int(lo, 16),
                end=int(hi, 16),
                perms=parts[1],
                offset=int(parts[2], 16),
                dev=parts[3],
                inode=int(parts[4]),
                path=parts[5].strip() if len(parts) > 5 else "",
            )
        )
    return out


def read_maps_text(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError) as e:
        raise ProcessGone(pid) from e


def read_maps(pid: int) -> list[Mapping]:
    return parse_maps(read_maps_text(pid))


@dataclass
class AddressSpace:
    """A snapshot of a process's mappings, with lookup by address."""

    mappings: list[Mapping] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.mappings.sort(key=lambda m: m.start)
        self._starts = [m.start for m in self.mappings]

    def find(self, addr: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.mappings[i].end:
            return self.mappings[i]
        return None

    def merged_with(self, newer: AddressSpace) -> AddressSpace:
        """The newer snapshot plus mappings of the older one that were unmapped since (dlclose, exit):
        samples taken before they went away must still resolve."""
        kept = list(newer.mappings)
        for m in self.mappings:
            n = newer.find(m.start)
            if n is None and newer.find(m.end - 1) is None:
                kept.append(m)
        return AddressSpace(kept)


def host_path(pid: int, path: str) -> str:
    """A path as the target sees it, opened from the daemon: through the target's root, so files of
    processes in other mount namespaces (containers) resolve to the right file."""
    return f"/proc/{pid}/root{path}"


def open_mapped_file(pid: int, m: Mapping) -> str:
    """Best path to read a mapped file: map_files/ also works for deleted or replaced files."""
    candidates = [f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}", host_path(pid, m.path.removesuffix(" (deleted)"))]
    if not m.deleted:
        candidates.append(m.path)
    for c in candidates:
        try:
            st = os.stat(c)
        except OSError:
            continue
        if st.st_ino == m.inode:
            return c
    raise FileNotFoundError(m.path)


MAX_OFFSET = 1 << 63  # pread's offset is signed: addresses at or above it are no user address anyway


class ProcessMemory:
    """Reads a process's memory through /proc/<pid>/mem (needs ptrace-read permission: root here)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        except FileNotFoundError as e:
            raise ProcessGone(pid) from e

    def read(self, addr: int, size: int) -> bytes:
        if not 0 <= addr < MAX_OFFSET:  # a garbage pointer (a structure read while the target changed it)
            raise MemoryError(f"cannot read {size} bytes at {addr:#x} in pid {self.pid}: not an address")
        try:
            data = os.pread(self._fd, size, addr)
        except OSError as e:  # EIO: unmapped address; ESRCH: process gone
            raise MemoryError(f"cannot read {size} bytes at {addr:#x} in pid {self.pid}: {e}") from e
        if len(data) != size:
            raise MemoryError(f"short read at {addr:#x} in pid {self.pid}")
        return data

    def read_u64(self, addr: int) -> int:
        return int.from_bytes(self.read(addr, 8), "little")

    def read_cstring(self, addr: int, limit: int = 4096) -> bytes:
        out = b""
        while len(out) < limit:
            chunk = self.read_up_to(addr + len(out), 256)
            if not chunk:
                break
            nul = chunk.find(b"\0")
            if nul >= 0:
                return out + chunk[:nul]
            out += chunk
        return out

    def read_up_to(self, addr: int, size: int) -> bytes:
        if not 0 <= addr < MAX_OFFSET:
            return b""
        try:
            return os.pread(self._fd, size, addr)
        except OSError:
            return b""

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ProcessMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_memory(pid: int, addr: int, data: bytes, ensure: Callable[[], None] | None = None) -> None:
    """Writes data at addr in the process through /proc/<pid>/mem (needs ptrace-attach permission: root
    here). ensure (a ProcessHandle's) runs once the file is open: the memory written is the bound process's.
    Raises ProcessGone, or MemoryError where addr is not writable memory of it."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_WRONLY)
    except FileNotFoundError as e:
        raise ProcessGone(pid) from e
    try:
        if ensure is not None:
            ensure()
        if os.pwrite(fd, data, addr) != len(data):
            raise MemoryError(f"short write at {addr:#x} in pid {pid}")
    except OSError as e:  # EIO: not mapped; ESRCH: the process is gone
        raise MemoryError(f"cannot write {len(data)} bytes at {addr:#x} in pid {pid}: {e}") from e
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    uid: int
    user: str
    command: str  # argv joined by spaces, or [comm] for kernel threads
    comm: str
    start_time: int  # clock ticks since boot: with pid, identifies a process across pid reuse
    is_kernel_thread: bool


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def process_info(pid: int) -> ProcessInfo:
    base = Path(f"/proc/{pid}")
    try:
        stat = (base / "stat").read_text()
        status = (base / "status").read_text()
        cmdline = (base / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError) as e:
        raise ProcessGone(pid) from e
    # comm may contain spaces and parentheses: it sits between the first '(' and the last ')'
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    start_time = int(fields[19])
    flags = int(fields[6])
    uid = 0
    for line in status.splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
            break
    is_kthread = bool(flags & 0x00200000)  # PF_KTHREAD
    args = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
    command = " ".join(args) if args else f"[{comm}]"
    return ProcessInfo(pid, uid, _user_name(uid), command, comm, start_time, is_kthread)


def thread_ids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError as e:
        raise ProcessGone(pid) from e


def pid_namespace(pid: int) -> tuple[int, int]:
    """(device, inode) of the process's pid namespace, as bpf_get_ns_current_pid_tgid() takes them."""
    try:
        st = os.stat(f"/proc/{pid}/ns/pid")
    except FileNotFoundError as e:
        raise ProcessGone(pid) from e
    return st.st_dev, st.st_ino


def thread_name(pid: int, tid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return None


def namespace_pid(pid: int) -> int:
    """The process's pid as it sees it (its innermost pid namespace's); pid itself where /proc does not say."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


def environ_value(pid: int, name: str) -> str | None:
    """A variable of the process's environment as it was at exec (what /proc shows); None if unset or
    unreadable."""
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return None


def is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def all_pids() -> list[int]:
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
