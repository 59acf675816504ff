"""USDT probes (<sys/sdt.h>): reading them from an ELF file's .note.stapsdt, and attaching BPF
programs to them for one process with their semaphores raised by the kernel.

bcc's USDT class needs the probes in the process before the program is compiled, and it writes
semaphores through /proc/<pid>/mem. deepctx attaches its USDT handlers like uprobes, per file and
filtered by pid, possibly before the process has loaded the file (the CUPTI agent is loaded by the CUDA
driver at cuInit): the kernel installs the breakpoints and raises the semaphores (uprobe
`ref_ctr_offset`) when the file gets mapped. The argument locations of each probe site go into a BPF
map (struct usdt_site, device_activity.h) that the handlers decode, so one compiled program serves any build.
"""

from __future__ import annotations

import ctypes as ct
import os
import re
import struct
from dataclasses import dataclass, field

from deepctx.host.elf.reader import ElfError, ElfFile
from deepctx.host.file_limits import OverCap
from deepctx.probes.uprobes import BPF_TRACE_UPROBE_MULTI, bcc_attach_uprobe, close_links, link_uprobe_multi

NT_STAPSDT = 3
USDT_MAX_ARGS = 4

# struct usdt_site.kind[]
ARG_NONE, ARG_REG, ARG_MEM, ARG_CONST = range(4)

# Register numbering shared with device_activity.bpf.c (usdt_load() and usdt_arg()).
REGISTERS = {
    "ax": 0, "bx": 1, "cx": 2, "dx": 3, "si": 4, "di": 5, "bp": 6, "sp": 7,
    "r8": 8, "r9": 9, "r10": 10, "r11": 11, "r12": 12, "r13": 13, "r14": 14, "r15": 15, "ip": 16,
}
_ALIASES = {
    "rax": "ax", "eax": "ax", "ax": "ax", "al": "ax", "ah": "ax",
    "rbx": "bx", "ebx": "bx", "bx": "bx", "bl": "bx", "bh": "bx",
    "rcx": "cx", "ecx": "cx", "cx": "cx", "cl": "cx", "ch": "cx",
    "rdx": "dx", "edx": "dx", "dx": "dx", "dl": "dx", "dh": "dx",
    "rsi": "si", "esi": "si", "si": "si", "sil": "si",
    "rdi": "di", "edi": "di", "di": "di", "dil": "di",
    "rbp": "bp", "ebp": "bp", "bp": "bp", "bpl": "bp",
    "rsp": "sp", "esp": "sp", "sp": "sp", "spl": "sp",
    "rip": "ip",
}
for _n in range(8, 16):
    for _suffix in ("", "d", "w", "b"):
        _ALIASES[f"r{_n}{_suffix}"] = f"r{_n}"

_ARG = re.compile(r"^(-?\d+)@(.+)$")
_MEM = re.compile(r"^(-?(?:0x[0-9a-fA-F]+|\d+))?\(%(\w+)\)$")


class UsdtError(Exception):
    """A probe that deepctx cannot attach to (an argument form it does not decode, a missing note)."""


@dataclass(frozen=True)
class UsdtArg:
    kind: int
    size: int  # bytes: 1, 2, 4 or 8
    signed: bool
    reg: int = 0  # REGISTERS value (ARG_REG, and the base of ARG_MEM)
    offset: int = 0  # ARG_MEM displacement
    value: int = 0  # ARG_CONST


@dataclass(frozen=True)
class UsdtProbe:
    provider: str
    name: str
    pc: int  # link-time virtual address of the probe site (adjusted for prelink)
    pc_offset: int  # file offset: what uprobes attach to
    semaphore: int  # link-time virtual address (0: none)
    semaphore_offset: int  # file offset (0: none)
    args: tuple[UsdtArg, ...] = field(default_factory=tuple)


def parse_arg(text: str) -> UsdtArg:
    """One operand of a probe's argument string, as gas prints it on x86-64: `8@%rdi`, `-4@%esi`,
    `8@-16(%rbp)`, `4@$5`."""
    m = _ARG.match(text)
    if not m:
        raise UsdtError(f"cannot decode USDT argument {text!r}")
    size_spec, loc = int(m.group(1)), m.group(2)
    size, signed = abs(size_spec), size_spec < 0
    if size not in (1, 2, 4, 8):
        raise UsdtError(f"USDT argument {text!r}: size {size}")
    if loc.startswith("$"):
        return UsdtArg(ARG_CONST, size, signed, value=int(loc[1:], 0))
    if loc.startswith("%"):
        reg = _ALIASES.get(loc[1:])
        if reg is None or reg == "ip":
            raise UsdtError(f"USDT argument {text!r}: register {loc}")
        return UsdtArg(ARG_REG, size, signed, reg=REGISTERS[reg])
    mm = _MEM.match(loc)
    if mm:
        reg = _ALIASES.get(mm.group(2))
        if reg is None or reg == "ip":  # %rip-relative: a symbol's address, not decoded here
            raise UsdtError(f"USDT argument {text!r}: base register %{mm.group(2)}")
        return UsdtArg(ARG_MEM, size, signed, reg=REGISTERS[reg], offset=int(mm.group(1) or "0", 0))
    raise UsdtError(f"cannot decode USDT argument {text!r}")


def vaddr_to_offset(segments: list[tuple[int, int, int]], vaddr: int) -> int | None:
    """The file offset of a virtual address, given the PT_LOAD segments as (offset, vaddr, filesz)."""
    for off, va, size in segments:
        if va <= vaddr < va + size:
            return vaddr - va + off
    return None


def read_probes(path: str, provider: str | None = None) -> list[UsdtProbe]:
    """Every probe site in the file's .note.stapsdt (one probe may have several sites)."""
    try:
        elf = ElfFile(path, allow_32bit=True)
    except ElfError as e:
        raise UsdtError(str(e)) from None
    with elf:
        is64 = elf.elfclass == 64
        if ".note.stapsdt" not in elf.sections:
            return []
        base_sec = elf.sections.get(".stapsdt.base")
        base_addr = base_sec.addr if base_sec is not None else None
        segments = [(p.offset, p.vaddr, p.filesz) for p in elf.load_segments()]
        try:  # the note of a file a target maps: capped like every section read from one
            data = bytes(elf.section_data(".note.stapsdt") or b"")
        except OverCap as e:
            raise UsdtError(str(e)) from None
        except ElfError as e:
            raise UsdtError(str(e)) from None
    word, fmt = (8, "<QQQ") if is64 else (4, "<III")
    out: list[UsdtProbe] = []
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
        pos += 12
        name = data[pos:pos + namesz]
        pos += (namesz + 3) & ~3
        desc = data[pos:pos + descsz]
        pos += (descsz + 3) & ~3
        if ntype != NT_STAPSDT or name.rstrip(b"\0") != b"stapsdt":
            continue
        pc, base, sem = struct.unpack_from(fmt, desc, 0)
        strings = desc[3 * word:].split(b"\0")
        prov, pname = strings[0].decode(), strings[1].decode()
        argstr = strings[2].decode() if len(strings) > 2 else ""
        if provider is not None and prov != provider:
            continue
        if base_addr is not None:
            pc += base_addr - base  # the file was prelinked: the note still has the old addresses
            if sem:
                sem += base_addr - base
        pc_off = vaddr_to_offset(segments, pc)
        if pc_off is None:
            raise UsdtError(f"{path}: probe {prov}:{pname} at {pc:#x} is outside every loaded segment")
        sem_off = vaddr_to_offset(segments, sem) if sem else 0
        args = tuple(parse_arg(a) for a in argstr.split()) if argstr else ()
        out.append(UsdtProbe(prov, pname, pc, pc_off, sem, sem_off or 0, args))
    return out


# --- attaching ----------------------------------------------------------------------------------


class UsdtSite(ct.Structure):
    """struct usdt_site (device_activity.h): how to read the arguments at one probe site."""

    _fields_ = [("nargs", ct.c_uint8), ("pad", ct.c_uint8 * 7),
                ("kind", ct.c_uint8 * USDT_MAX_ARGS), ("size", ct.c_uint8 * USDT_MAX_ARGS),
                ("is_signed", ct.c_uint8 * USDT_MAX_ARGS), ("reg", ct.c_uint8 * USDT_MAX_ARGS),
                ("offset", ct.c_int32 * USDT_MAX_ARGS), ("value", ct.c_int64 * USDT_MAX_ARGS)]


class UsdtSiteKey(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("pad", ct.c_uint32), ("addr", ct.c_uint64)]


def site_spec(probe: UsdtProbe) -> UsdtSite:
    if len(probe.args) > USDT_MAX_ARGS:
        raise UsdtError(f"probe {probe.provider}:{probe.name} has {len(probe.args)} arguments")
    s = UsdtSite()
    s.nargs = len(probe.args)
    for i, a in enumerate(probe.args):
        s.kind[i], s.size[i], s.is_signed[i], s.reg[i] = a.kind, a.size, int(a.signed), a.reg
        s.offset[i], s.value[i] = a.offset, a.value
    return s


class UsdtAttacher:
    """Attaches BPF functions to USDT probe sites of one process. Uses a uprobe_multi link per (file,
    function) where the kernel has it (6.6+), else one perf-event uprobe per site."""

    def __init__(self, bpf: object) -> None:
        self.bpf = bpf
        self.multi: bool | None = None
        self.links: list[int] = []
        self.sites = 0

    def attach(self, fn_name: str, path: str, pid: int, probes: list[UsdtProbe]) -> list[int]:
        """Attaches fn_name at every site of `probes`; returns the link fds it made (empty on the
        perf-event path, where bcc owns the events)."""
        if not probes:
            return []
        from bcc import BPF

        offsets = [p.pc_offset for p in probes]
        refs = [p.semaphore_offset for p in probes]
        if self.multi is not False:
            try:
                fd = self.bpf.load_func(fn_name.encode(), BPF.KPROBE,  # type: ignore[attr-defined]
                                        attach_type=BPF_TRACE_UPROBE_MULTI).fd
                link = link_uprobe_multi(fd, path, offsets, retprobe=False, pid=pid, ref_ctr_offsets=refs)
                self.multi = True
                self.links.append(link)
                self.sites += len(offsets)
                return [link]
            except Exception:
                if self.multi:
                    raise
                self.multi = False
                fn = self.bpf.funcs.pop(fn_name.encode(), None)  # type: ignore[attr-defined]
                if fn is not None:
                    os.close(fn.fd)
        attach_uprobe = bcc_attach_uprobe()
        fn = self.bpf.load_func(fn_name.encode(), BPF.KPROBE)  # type: ignore[attr-defined]
        for off, ref in zip(offsets, refs, strict=True):
            ev = self.bpf._get_uprobe_evname(b"p", os.fsencode(path), off, pid)  # type: ignore[attr-defined]
            efd = attach_uprobe(fn.fd, 0, ev, os.fsencode(path), off, pid, ref)
            if efd < 0:
                raise OSError(f"cannot attach a USDT probe at {path}+{off:#x}")
            self.bpf._add_uprobe_fd(ev, efd)  # type: ignore[attr-defined]
            self.sites += 1
        return []

    def close_link(self, fd: int) -> None:
        if fd in self.links:
            self.links.remove(fd)
            os.close(fd)

    def close(self) -> None:
        close_links(self.links)
        self.links.clear()
