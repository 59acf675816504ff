"""PC sampling's part of the device family: the CUPTI agent's pcs probe (pc_samples.h), copied by
pc_samples.bpf.c into the ring buffer dev_pcs, decoded here into PcsData (records, names, cubins, the
device, statuses). Asked for by the capture's request (`deepctx attach --pc-sampling`: its options are
written into the agent's deepctx_pcs_config, hand_options) or through the target's environment (`deepctx run
--pc-sampling` sets DEEPCTX_PC_SAMPLING=1), so a capture without either composes, attaches and reads nothing
of this."""

from __future__ import annotations

import ctypes as ct
import re
import struct
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deepctx.host.elf.image import ElfImage
from deepctx.host.procfs import Mapping, read_maps, write_memory
from deepctx.probes.family import read_source
from deepctx.probes.maps import RingSink, ring_sink

# Mirrors of pc_samples.h (tests/integration/device/test_pc_sampling.py checks them against the header).
PCS_CHUNK, PCS_DATA = 4088, 4096
PCS_MSG_RECORDS, PCS_MSG_NAME, PCS_MSG_CUBIN, PCS_MSG_STALL, PCS_MSG_STATUS, PCS_MSG_DEVICE = 1, 2, 3, 4, 5, 6
PCS_ON, PCS_DONE, PCS_E_UNSUPPORTED, PCS_E_CUPTI, PCS_E_NO_API = 1, 2, -1, -2, -3
# The target's environment: what `deepctx run` sets for the agent (and the daemon reads back)
ENV_ON, ENV_KERNEL, ENV_PERIOD, ENV_DURATION = ("DEEPCTX_PC_SAMPLING", "DEEPCTX_PC_KERNEL", "DEEPCTX_PC_PERIOD",
                                                "DEEPCTX_PC_DURATION_MS")
PC_PERIOD_MIN, PC_PERIOD_MAX = 5, 31  # CUPTI's SAMPLING_PERIOD: 2^n cycles between samples
PC_DURATION_MAX_MS = 3_600_000
CONFIG_SYMBOL = "deepctx_pcs_config"  # the agent's struct pcs_config: the options deepctxd hands it (attach)


class PcsRecord(ct.Structure):
    _fields_ = [("cubin_crc", ct.c_uint64), ("pc_offset", ct.c_uint64), ("name", ct.c_uint64),
                ("stall", ct.c_uint32), ("samples", ct.c_uint32), ("correlation", ct.c_uint32),
                ("function_index", ct.c_uint32)]


class PcsCubinHead(ct.Structure):
    _fields_ = [("crc", ct.c_uint64), ("size", ct.c_uint64), ("offset", ct.c_uint64), ("module", ct.c_uint32),
                ("pad", ct.c_uint32)]


class PcsStatus(ct.Structure):
    _fields_ = [("code", ct.c_int32), ("period", ct.c_uint32), ("total_samples", ct.c_uint64),
                ("dropped_samples", ct.c_uint64), ("non_user_samples", ct.c_uint64)]


class PcsDevice(ct.Structure):
    _fields_ = [("ordinal", ct.c_uint32), ("sm_count", ct.c_uint32), ("cc_major", ct.c_uint32),
                ("cc_minor", ct.c_uint32), ("name", ct.c_char * 256)]


class PcsConfig(ct.Structure):
    _fields_ = [("on", ct.c_uint32), ("period", ct.c_uint32), ("duration_ms", ct.c_uint32), ("pad", ct.c_uint32)]


class PcsEvent(ct.Structure):
    _fields_ = [("pid", ct.c_uint32), ("kind", ct.c_uint32), ("len", ct.c_uint32), ("cut", ct.c_uint32),
                ("data", ct.c_uint8 * PCS_DATA)]


_RECORD = struct.Struct("<QQQIIII")
_HEAD = 16  # pid, kind, len, cut
_CUBIN_HEAD = ct.sizeof(PcsCubinHead)
_STATUS = ct.sizeof(PcsStatus)
MAX_CUBIN_BYTES = 256 << 20  # a cubin announced larger is not assembled (a bad message must not cost that much)


@dataclass(frozen=True)
class PcsOptions:
    """What the capture's request (attach) or the target's environment (run) asks for."""

    kernel: str | None = None  # a regular expression over kernel names (Python's re, searched)
    period: int = 0  # log2 of the cycles between samples; 0: CUPTI's default
    duration_ms: int = 0  # 0: the agent's default

    @classmethod
    def from_environment(cls, environ: Callable[[str], str | None]) -> PcsOptions | None:
        if (environ(ENV_ON) or "") != "1":
            return None
        period = environ(ENV_PERIOD) or "0"
        duration = environ(ENV_DURATION) or "0"
        kernel = environ(ENV_KERNEL) or None
        if kernel is not None:
            try:
                re.compile(kernel)
            except re.error:  # the CLI refuses these; one set by hand is taken literally
                kernel = re.escape(kernel)
        return cls(kernel, int(period) if period.isdigit() else 0, int(duration) if duration.isdigit() else 0)

    def matches(self, *names: str) -> bool:
        return self.kernel is None or any(re.search(self.kernel, n) for n in names if n)

    def config(self) -> PcsConfig:
        """What the agent reads (the kernel regex is the daemon's to apply: the agent samples every kernel)."""
        return PcsConfig(1, self.period, self.duration_ms, 0)


class OldAgent(ValueError):
    """The process's agent has no deepctx_pcs_config: it was built before attach could hand it options."""


def config_address(file: str, mappings: list[Mapping]) -> int | None:
    """Where the agent `file`, mapped as `mappings` in a process, has its deepctx_pcs_config (None: an agent
    without it). The load bias is that of the file's first segment (p_vaddr 0 maps at offset 0)."""
    with ElfImage(file) as elf:
        sym = elf.symbol(CONFIG_SYMBOL)
        if sym is None or sym[1] != ct.sizeof(PcsConfig) or not elf.segments:
            return None
        first = elf.segments[0]
        return min(m.start - m.offset for m in mappings) + sym[0] - (first.vaddr - first.offset)


def hand_options(pid: int, file: str, mappings: list[Mapping], options: PcsOptions,
                 ensure: Callable[[], None] | None = None) -> None:
    """Writes the options into the agent's deepctx_pcs_config in the process, before the pcs probe's semaphore
    rises (the agent reads them at its start). Memory written through /proc, not a call made in a borrowed
    thread: it reaches an agent however it came (injected now or by an earlier capture, loaded by the driver
    from the environment) without stopping the process. ensure: a ProcessHandle's (the bound process)."""
    addr = config_address(file, mappings)
    if addr is None:
        raise OldAgent("the deepctx agent in the process was built before `attach --pc-sampling` (it has no "
                       f"{CONFIG_SYMBOL}): start the program with `deepctx run --pc-sampling`")
    data = bytes(options.config())
    # /proc/PID/mem writes even read-only pages (as a debugger's breakpoints): the symbol comes from a file the
    # target's owner may have chosen, so the bytes go only where the process itself could write them
    if not any(m.start <= addr and addr + len(data) <= m.end and "w" in m.perms for m in read_maps(pid)):
        raise OldAgent(f"the agent's {CONFIG_SYMBOL} is not in writable memory of process {pid} (not deepctx's "
                       "agent?): start the program with `deepctx run --pc-sampling`")
    write_memory(pid, addr, data, ensure)


@dataclass
class Cubin:
    crc: int
    module: int
    size: int
    data: bytearray
    received: int = 0

    @property
    def complete(self) -> bool:
        return self.received >= self.size


@dataclass
class PcsStatusMessage:
    code: int
    period: int
    total_samples: int
    dropped_samples: int
    non_user_samples: int
    text: str


@dataclass
class PcsData:
    """Everything one capture's agent handed over."""

    samples: dict[tuple[int, int, int, int], int] = field(default_factory=lambda: defaultdict(int))
    # (name id, cubin crc, pc offset, stall index) -> samples
    names: dict[int, str] = field(default_factory=dict)
    stalls: dict[int, str] = field(default_factory=dict)
    cubins: dict[int, Cubin] = field(default_factory=dict)
    statuses: list[PcsStatusMessage] = field(default_factory=list)
    device: dict[str, Any] = field(default_factory=dict)
    messages: int = 0
    cut: int = 0  # messages the BPF side had to cut (longer than PCS_CHUNK: none from this agent)

    def add_message(self, kind: int, payload: bytes, cut: bool = False) -> None:
        """One pcs probe's payload (the message's data, `len` bytes)."""
        self.messages += 1
        self.cut += int(cut)
        if kind == PCS_MSG_RECORDS:
            for crc, pc, name, stall, samples, _corr, _fi in _RECORD.iter_unpack(
                    payload[:len(payload) - len(payload) % _RECORD.size]):
                self.samples[(name, crc, pc, stall)] += samples
        elif kind in (PCS_MSG_NAME, PCS_MSG_STALL) and len(payload) >= 8:
            ident = int.from_bytes(payload[:8], "little")
            text = payload[8:].decode(errors="replace")
            (self.names if kind == PCS_MSG_NAME else self.stalls)[ident] = text
        elif kind == PCS_MSG_CUBIN and len(payload) >= _CUBIN_HEAD:
            head = PcsCubinHead.from_buffer_copy(payload[:_CUBIN_HEAD])
            chunk = payload[_CUBIN_HEAD:]
            if head.size > MAX_CUBIN_BYTES or head.offset + len(chunk) > head.size:
                return
            c = self.cubins.get(head.crc)
            if c is None or c.size != head.size:
                c = self.cubins[head.crc] = Cubin(head.crc, head.module, head.size, bytearray(head.size))
            c.data[head.offset:head.offset + len(chunk)] = chunk
            c.received += len(chunk)
        elif kind == PCS_MSG_STATUS and len(payload) >= _STATUS:
            s = PcsStatus.from_buffer_copy(payload[:_STATUS])
            self.statuses.append(PcsStatusMessage(s.code, s.period, s.total_samples, s.dropped_samples,
                                                  s.non_user_samples, payload[_STATUS:].decode(errors="replace")))
        elif kind == PCS_MSG_DEVICE and len(payload) >= ct.sizeof(PcsDevice):
            d = PcsDevice.from_buffer_copy(payload[:ct.sizeof(PcsDevice)])
            self.device = {"name": d.name.decode(errors="replace") or None, "sm_count": d.sm_count or None,
                           "compute_capability": f"{d.cc_major}.{d.cc_minor}" if d.cc_major else None}

    def is_not_issued(self, stall: int) -> bool:
        """A stall reason CUPTI counts twice: X_not_issued is the subset of X's samples taken when the warp's
        scheduler issued nothing (CUPTI's latency samples), not samples of their own."""
        return self.stalls.get(stall, "").endswith("_not_issued")

    def sample_count(self) -> int:
        """The samples taken: every record's samples but those of the not-issued subsets."""
        return sum(n for (_name, _crc, _pc, stall), n in self.samples.items() if not self.is_not_issued(stall))

    def failure(self) -> PcsStatusMessage | None:
        return next((s for s in self.statuses if s.code < 0), None)

    def totals(self) -> PcsStatusMessage | None:
        """The sum of the agent's PCS_DONE statuses (one per context), None before any."""
        done = [s for s in self.statuses if s.code == PCS_DONE]
        if not done:
            return None
        return PcsStatusMessage(PCS_DONE, 0, sum(s.total_samples for s in done), sum(s.dropped_samples for s in done),
                                sum(s.non_user_samples for s in done), "")


class PcSampling:
    """The device family's PC-sampling part (probes/device_activity.py calls it)."""

    def __init__(self, options: PcsOptions, ringbuf_pages: int = 4096) -> None:
        self.options = options
        self.ringbuf_pages = ringbuf_pages  # 16 MiB: cubins come whole, at the first sample of their code
        self.data = PcsData()
        self.pid = 0
        self.warnings: list[str] | None = None  # the capture's warnings list (the target's), for the build

    def source(self) -> str:
        return read_source("pc_samples.bpf.c")

    def defines(self) -> dict[str, int | str]:
        return {"PCS_RINGBUF_PAGES": self.ringbuf_pages}

    def open(self, bpf: Any, pid: int) -> None:
        self.pid = pid
        ring_sink(bpf, "dev_pcs").fn = self._on_event

    def close(self, bpf: Any) -> None:
        """After the last drain: the program serves other captures next."""
        ring_sink(bpf, "dev_pcs").fn = RingSink.drop

    def attach(self, attacher: Any, path: str, pid: int, probes: list[Any]) -> None:
        """The pcs probe, before the others: its semaphore is up when the agent starts."""
        attacher.attach("on_dev_pcs", path, pid, [p for p in probes if p.name == "pcs"])

    def _on_event(self, ctx: Any, data: Any, size: int) -> None:
        e = ct.cast(data, ct.POINTER(PcsEvent)).contents
        if e.pid != self.pid:
            return
        n = min(e.len, PCS_DATA)
        self.data.add_message(e.kind, ct.string_at(ct.addressof(e) + _HEAD, n), bool(e.cut))

    def stats(self, bpf: Any) -> dict[str, int]:
        lost = bpf[b"dev_pcs_lost"][ct.c_int(0)].value
        d = self.data
        out = {"pc_sampling_messages": d.messages, "pc_sampling_messages_lost": lost,
               "pc_sampling_samples": d.sample_count()}
        totals = d.totals()
        if totals is not None:
            out["pc_sampling_samples_dropped_by_cupti"] = totals.dropped_samples
        started = next((s for s in d.statuses if s.code == PCS_ON), None)
        if started is not None:  # the period the agent configured (its options: the request's or the environment's)
            out["pc_sampling_period_log2"] = started.period
        if d.device.get("sm_count"):  # the document's `device` part is made from these (profiles/document.py)
            out["device_sm_count"] = d.device["sm_count"]
            major, _, minor = (d.device.get("compute_capability") or "0.0").partition(".")
            out["device_compute_capability"] = int(major) * 10 + int(minor or 0)
        return out
