"""Compiled programs kept on disk: a daemon that starts again loads its programs without compiling their code
(#30.1, the cache keyed by kernel, program and bcc that the issue names).

Compiling a program's code costs clang about 2.2 s on the CI VM (the probe families' functions and their
unrolled walks); its maps alone compile in about 0.4 s. After a compile the daemon writes each function's
instructions to <cache_dir>/programs/<key>.json, with the places where an instruction names a map (a 64-bit
load of a map's fd, `src_reg` BPF_PSEUDO_MAP_FD or BPF_PSEUDO_MAP_VALUE, which bcc patched in as it made the
maps) by the map's name. A later daemon with the same key compiles the program's text with
DEEPCTX_DECLS_ONLY, under which the families' C keeps its functions out (maps, structs and defines only): bcc
makes the same maps, each map's new fd goes where its name stands, and the functions load from the file. The
kernel's verifier checks them as it checks any program.

The key covers the program's text and flags, the kernel (release, build and machine), bcc's version and its
library file, the kernel headers bcc compiles against, and this file's format. A file that is not deepctxd's
own, or that others may write (host/private_files.py), or does not parse, or names a map the program lacks, is
not used; a program whose cached functions the kernel refuses is compiled as before (ProgramPool), and the file
is written again from that compile.
"""

from __future__ import annotations

import base64
import ctypes as ct
import errno
import hashlib
import json
import logging
import os
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from deepctx.host.private_files import open_private, private_dir, replace_private
from deepctx.probes.maps import table_names

log = logging.getLogger("deepctx.programs")

FORMAT = 1  # bump when the file's layout or what DEEPCTX_DECLS_ONLY leaves out changes
DECLS_ONLY = "-DDEEPCTX_DECLS_ONLY=1"
INSN_BYTES = 8
LD_IMM64 = 0x18  # BPF_LD | BPF_IMM | BPF_DW: two instruction slots
PSEUDO_MAP_FD, PSEUDO_MAP_VALUE = 1, 2  # src_reg of a load of a map (or of a map value's address) by fd
MAX_FILE_BYTES = 16 << 20
MAX_FILES = 64  # programs kept on disk (each 20 to 120 KB); the least recently used go first


@dataclass(frozen=True)
class CachedCode:
    """A program's functions as saved: instructions with the map fds zeroed, and where each map goes."""

    functions: dict[bytes, bytes]
    relocs: dict[bytes, list[tuple[int, str]]]  # function -> (instruction index, map name)

    def patched(self, fds: dict[str, int]) -> dict[bytes, bytes]:
        """The functions with each map's fd (fds: map name -> fd) in its loads."""
        out = {}
        for name, insns in self.functions.items():
            buf = bytearray(insns)
            for idx, table in self.relocs.get(name, []):
                struct.pack_into("=i", buf, idx * INSN_BYTES + 4, fds[table])
            out[name] = bytes(buf)
        return out


@dataclass
class CacheCounters:
    saved: int = 0  # programs written to it after a compile
    refused: int = 0  # cached programs the kernel or the checks refused (compiled instead)

    def as_totals(self) -> dict[str, int]:
        return {"bpf_programs_cached": self.saved, "bpf_programs_cache_refused": self.refused}


@dataclass
class ProgramCache:
    """The daemon's compiled programs on disk (folder None: no disk cache, every program is compiled)."""

    folder: Path | None
    counters: CacheCounters = field(default_factory=CacheCounters)
    _refused: set[str] = field(default_factory=set)  # keys not to load again in this daemon
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def at(cls, folder: str | Path | None) -> ProgramCache:
        return cls(private_dir(Path(folder), "compiled programs") if folder is not None else None)

    def path(self, key: str) -> Path | None:
        return self.folder / f"{key}.json" if self.folder is not None else None

    def load(self, key: str) -> CachedCode | None:
        """The program saved under key, or None (none, refused earlier, or unreadable: said in the log)."""
        path = self.path(key)
        if path is None or key in self._refused:
            return None
        try:
            with open_private(path) as f:
                data = f.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                raise ValueError("larger than any program")
            code = parse(data, key)
            os.utime(path)  # used: the last to go when the folder is pruned
            return code
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # not this format's JSON
            log.warning("cached program not used", extra={"program": key, "path": str(path), "error": str(e)})
            return None

    def save(self, key: str, bpf: Any) -> bool:
        """Writes the compiled program's functions under key; False (and why, in the log) when it cannot be
        kept: a function loads a map by an fd that is none of the program's maps, or the folder is not
        writable."""
        path = self.path(key)
        if path is None:
            return False
        try:
            code = extract(bpf)
            data = dump(code, key)
            replace_private(path, lambda f: _write(f, data))
        except (OSError, ValueError) as e:
            log.warning("program not cached", extra={"program": key, "path": str(path), "error": str(e)})
            return False
        with self._lock:
            self.counters.saved += 1
            self._refused.discard(key)
        self.prune()
        return True

    def prune(self, keep: int = MAX_FILES) -> int:
        """Deletes the least recently used programs beyond keep (other kernels', bcc's and deepctx's versions
        leave theirs behind); returns how many went."""
        if self.folder is None:
            return 0
        try:
            files = sorted(self.folder.glob("*.json"), key=lambda f: f.stat().st_mtime_ns, reverse=True)
        except OSError:  # one went meanwhile (another daemon's prune): the next save prunes again
            return 0
        gone = 0
        for old in files[keep:]:
            try:
                old.unlink()
                gone += 1
            except OSError:
                pass
        return gone

    def refuse(self, key: str, why: str) -> None:
        """The program under key is not to be loaded from disk again (the next compile writes it anew)."""
        with self._lock:
            self.counters.refused += 1
            self._refused.add(key)
        log.warning("cached program refused: compiling it", extra={"program": key, "reason": why})


def _write(f: BinaryIO, data: bytes) -> None:
    f.write(data)


def cache_key(text: str, cflags: list[str]) -> str:
    """What a cached program must match: its text and flags, the headers its text includes (every *.h of its
    -I folders: the families' struct headers), the kernel, bcc and the kernel headers it compiles with."""
    h = hashlib.sha256()
    for part in (str(FORMAT), text, "\0".join(cflags), *_included(cflags), *_environment()):
        h.update(part.encode(errors="surrogateescape"))
        h.update(b"\0")
    return h.hexdigest()[:32]


def _included(cflags: list[str]) -> list[str]:
    """Each header of the -I folders, by name and content (a header changed is another program)."""
    out = []
    for flag in cflags:
        if flag.startswith("-I"):
            for header in sorted(Path(flag[2:]).glob("*.h")):
                try:
                    out.append(f"{header.name}\0{header.read_text(errors='surrogateescape')}")
                except OSError:
                    out.append(f"{header.name}\0unreadable")
    return out


def _environment() -> list[str]:
    u = os.uname()
    out = [u.release, u.version, u.machine]
    try:
        import bcc
        from bcc import libbcc

        out.append(str(getattr(bcc, "__version__", "")))
        out.append(_file_identity(_mapped("libbcc.so") or getattr(libbcc.lib, "_name", "") or ""))
    except ImportError:
        out.append("no bcc")
    out.append(_file_identity(f"/lib/modules/{u.release}/build"))  # the headers, or the fallback's link
    return out


def _mapped(name: str, maps: str = "/proc/self/maps") -> str | None:
    """The path of the first file this process maps whose name starts with name (libbcc's own file)."""
    try:
        for line in Path(maps).read_text().splitlines():
            path = line.split(maxsplit=5)[-1]
            if path.startswith("/") and os.path.basename(path).startswith(name):
                return path
    except OSError:
        pass
    return None


def _file_identity(path: str) -> str:
    """path's real path, size and change time ("" parts where it is missing)."""
    if not path:
        return ""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return real
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


def extract(bpf: Any) -> CachedCode:
    """The compiled program's functions and their map loads (by name); ValueError where a load names an fd
    that is none of the program's maps, or an instruction of a kind this cache does not handle."""
    from bcc import libbcc

    lib = libbcc.lib
    mod = bpf.module
    fds: dict[int, str] = {}
    for name in table_names(mod):
        fd = lib.bpf_table_fd(mod, name)
        if fd >= 0:
            fds[fd] = name.decode()
    functions: dict[bytes, bytes] = {}
    relocs: dict[bytes, list[tuple[int, str]]] = {}
    for i in range(lib.bpf_num_functions(mod)):
        name = lib.bpf_function_name(mod, i)
        start, size = lib.bpf_function_start(mod, name), lib.bpf_function_size(mod, name)
        if not start or size % INSN_BYTES:
            raise ValueError(f"function {name!r} has no instructions")
        insns = bytearray(ct.string_at(start, size))
        relocs[name] = _map_loads(insns, fds, name)
        functions[name] = bytes(insns)
    return CachedCode(functions, relocs)


def _map_loads(insns: bytearray, fds: dict[int, str], name: bytes) -> list[tuple[int, str]]:
    """Each 64-bit load of a map by fd in insns, by map name; their fds zeroed in insns."""
    out = []
    i, n = 0, len(insns) // INSN_BYTES
    while i < n:
        code, regs = insns[i * INSN_BYTES], insns[i * INSN_BYTES + 1]
        if code != LD_IMM64:
            i += 1
            continue
        src = regs >> 4
        if src in (PSEUDO_MAP_FD, PSEUDO_MAP_VALUE):
            (fd,) = struct.unpack_from("=i", insns, i * INSN_BYTES + 4)
            if fd not in fds:
                raise ValueError(f"{name.decode()}: instruction {i} loads fd {fd}, none of the program's maps")
            out.append((i, fds[fd]))
            struct.pack_into("=i", insns, i * INSN_BYTES + 4, 0)
        elif src != 0:
            raise ValueError(f"{name.decode()}: instruction {i} is a 64-bit load of kind {src}")
        i += 2
    return out


def dump(code: CachedCode, key: str) -> bytes:
    return json.dumps({
        "format": FORMAT, "key": key,
        "functions": {n.decode(): base64.b64encode(b).decode() for n, b in code.functions.items()},
        "relocs": {n.decode(): [[i, t] for i, t in r] for n, r in code.relocs.items()},
    }, sort_keys=True).encode()


def parse(data: bytes, key: str) -> CachedCode:
    """A saved program (ValueError, KeyError or TypeError where it is not one of this format and key)."""
    doc = json.loads(data)
    if doc.get("format") != FORMAT or doc.get("key") != key:
        raise ValueError("another format or key")
    functions = {n.encode(): base64.b64decode(b, validate=True) for n, b in doc["functions"].items()}
    relocs: dict[bytes, list[tuple[int, str]]] = {}
    for n, r in doc["relocs"].items():
        insns = functions[n.encode()]
        if len(insns) % INSN_BYTES:
            raise ValueError(f"{n}: not whole instructions")
        out = []
        for i, table in r:
            if not (isinstance(i, int) and isinstance(table, str) and 0 <= i < len(insns) // INSN_BYTES - 1
                    and insns[i * INSN_BYTES] == LD_IMM64):
                raise ValueError(f"{n}: relocation {i} is not a 64-bit load")
            out.append((i, table))
        relocs[n.encode()] = out
    return CachedCode(functions, relocs)


def load_program(key: str, text: str, cflags: list[str], code: CachedCode, compile_text: Any) -> Any | None:
    """A bcc program of the cached code (saved under key): the text compiled with DEEPCTX_DECLS_ONLY (its maps),
    the functions from code with the new maps' fds; None (the new module freed) where a map the code names is
    missing."""
    from bcc import libbcc

    bpf = compile_text(text, [*cflags, DECLS_ONLY])
    lib = libbcc.lib
    names = {t for r in code.relocs.values() for _, t in r}
    fds = {t: lib.bpf_table_fd(bpf.module, t.encode()) for t in names}
    missing = sorted(t for t, fd in fds.items() if fd < 0)
    if missing or lib.bpf_num_functions(bpf.module):
        bpf.cleanup()
        log.warning("cached program does not fit its maps", extra={"missing": missing})
        return None
    bpf.__class__ = _cached_class()
    bpf.deepctx_code = code.patched(fds)
    bpf.deepctx_cache_key = key  # what ProgramPool refuses should the kernel refuse the code
    return bpf


_CLASS: type | None = None


def _cached_class() -> type:
    """bcc.BPF whose load_func takes a function's instructions from the cache (made at the first use: bcc is
    imported late, as everywhere in the probes)."""
    global _CLASS
    if _CLASS is None:
        from bcc import BPF, libbcc

        lib = libbcc.lib

        class CachedBPF(BPF):  # type: ignore[misc]
            deepctx_code: dict[bytes, bytes]

            def load_func(self, func_name: Any, prog_type: int, device: Any = None, attach_type: int = -1) -> Any:
                name = func_name if isinstance(func_name, bytes) else str(func_name).encode()
                if name in self.funcs:
                    return self.funcs[name]
                insns = self.deepctx_code.get(name)
                if insns is None:
                    raise Exception(f"Unknown program {name!r}")
                buf = ct.create_string_buffer(insns, len(insns))
                fd = lib.bcc_func_load(self.module, prog_type, name, buf, len(insns),
                                       lib.bpf_module_license(self.module), lib.bpf_module_kern_version(self.module),
                                       0, None, 0, device, attach_type)
                if fd < 0:
                    err = ct.get_errno()
                    if err == errno.EPERM:
                        raise Exception("Need super-user privileges to run")
                    raise Exception(f"Failed to load BPF program {name!r}: {os.strerror(err)}")
                fn = BPF.Function(self, name, fd)
                self.funcs[name] = fn
                return fn

        _CLASS = CachedBPF
    return _CLASS


def is_cached(bpf: Any) -> bool:
    """bpf was loaded from the disk cache (its functions are the file's)."""
    return hasattr(bpf, "deepctx_code")

