"""Compact unwind tables for one ELF file, built from its .eh_frame (and .debug_frame).

A table is sorted rows (pc relative to `base`, rule index), plus the file's distinct rules. A row
holds from its pc up to the next row's; pcs outside every FDE get a CFA_NONE row so the walker falls
back to frame pointers there. Consecutive rows with equal rules are merged.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field

import numpy as np

from deepctx.host.elf.reader import ElfFile
from deepctx.host.file_limits import LIMITS, OverCap
from deepctx.host.unwind import interp, native_rows
from deepctx.host.unwind.arch import (
    INFO_NONE,
    INFO_UNSUPPORTED,
    Arch,
    Info,
    arch_for_machine,
    compile_state,
)
from deepctx.host.unwind.cfi import CfiError, iter_fdes

MAX_TABLE_SPAN = 1 << 32  # row pcs are 32-bit offsets from base


@dataclass
class UnwindTable:
    arch: str
    base: int  # link-time address that row pcs are relative to
    pcs: np.ndarray  # uint32, strictly increasing
    infos: np.ndarray  # indices into rules (uint16 or uint32)
    rules: list[Info]  # rules[0] is INFO_NONE
    build_id: str | None = None
    stats: dict[str, float] = field(default_factory=dict)
    warning: str | None = None  # why a file got no table though it has CFI (a cap): shown in the profile

    def __len__(self) -> int:
        return len(self.pcs)

    @property
    def nbytes(self) -> int:
        """Bytes the rows take in the BPF map (8 per row; rules are shared between files)."""
        return 8 * len(self.pcs)

    def pages(self, page_shift: int) -> int:
        """Entries of the page index this table needs in the BPF map."""
        return (int(self.pcs[-1]) >> page_shift) + 2 if len(self.pcs) else 0

    @property
    def memory(self) -> int:
        """Bytes the table takes in the daemon."""
        return self.pcs.nbytes + self.infos.nbytes + 64 * len(self.rules)

    def rule_at(self, vaddr: int) -> Info:
        """The compact rule for a link-time address (INFO_NONE outside the table)."""
        rel = vaddr - self.base
        if rel < 0 or rel >= MAX_TABLE_SPAN or len(self.pcs) == 0:
            return INFO_NONE
        i = int(np.searchsorted(self.pcs, rel, side="right")) - 1
        return INFO_NONE if i < 0 else self.rules[int(self.infos[i])]


def empty_table(arch: str, build_id: str | None = None, warning: str | None = None) -> UnwindTable:
    return UnwindTable(arch, 0, np.zeros(0, np.uint32), np.zeros(0, np.uint32), [INFO_NONE], build_id,
                       warning=warning)


class _Builder:
    """Interprets FDEs into flat row lists, sharing work between FDEs with identical instructions."""

    def __init__(self, arch: Arch, max_rows: int | None = None, path: str = "", native: bool = True) -> None:
        self.arch = arch
        self.native = native_rows.library() if native else None  # None: interpreted here, in Python
        # rows before merging: they bound the builder's arrays too
        self.max_rows = LIMITS.max_unwind_rows if max_rows is None else max_rows
        self.path = path
        self.rule_index: dict[Info, int] = {INFO_NONE: 0}
        self.state_index: dict[interp.State, int] = {}
        # Most FDEs repeat another's instructions (78% of libtorch_cpu's 345k): interpret each text once.
        self.fde_memo: dict[tuple[int, int, bytes], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self.cie_states: dict[tuple[int, int], interp.State] = {}
        # flat typed arrays, not lists of ints: libtorch_cpu has 2.6M rows
        self.begins = array("Q")
        self.ends = array("Q")
        self.counts = array("Q")
        self.rel = array("I")  # offsets inside an FDE
        self.idx = array("I")
        self.errors: list[str] = []
        self.fdes = 0

    def _rule(self, state: interp.State) -> int:
        i = self.state_index.get(state)
        if i is None:
            info = compile_state(interp.State._make(state), self.arch)
            i = self.rule_index.setdefault(info, len(self.rule_index))
            self.state_index[state] = i
        return i

    def add_section(
        self, src: int, data: bytes, addr: int, is_eh: bool, skip: tuple[np.ndarray, np.ndarray] | None
    ) -> None:
        if self.native is not None:
            self._add_native(self.native, data, addr, is_eh, skip)
            return
        a = self.arch
        memo = self.fde_memo
        for fde in iter_fdes(data, addr, is_eh, self.errors):
            if skip is not None and _overlaps(skip, fde.pc_begin, fde.pc_end):
                continue
            cie = fde.cie
            key = (src, cie.offset, fde.instructions)
            hit = memo.get(key)
            if hit is None:
                try:
                    ckey = (src, cie.offset)
                    init = self.cie_states.get(ckey)
                    if init is None:
                        _, init = interp.run(
                            cie.initial,
                            interp.EMPTY,
                            interp.EMPTY,
                            cie.code_align,
                            cie.data_align,
                            a.fp_reg,
                            a.ra_reg,
                        )
                        self.cie_states[ckey] = init
                    rows, _ = interp.run(
                        fde.instructions, init, init, cie.code_align, cie.data_align, a.fp_reg, a.ra_reg
                    )
                except (CfiError, IndexError) as e:
                    self.errors.append(f"FDE {fde.pc_begin:#x}: {e}")
                    continue
                if rows[-1][0] >= MAX_TABLE_SPAN:
                    self.errors.append(f"FDE {fde.pc_begin:#x}: advances past 4 GiB")
                    continue
                hit = (tuple(r[0] for r in rows), tuple(self._rule(r[1]) for r in rows))
                memo[key] = hit
            self.fdes += 1
            self.begins.append(fde.pc_begin)
            self.ends.append(fde.pc_end)
            self.counts.append(len(hit[0]))
            self.rel.extend(hit[0])
            self.idx.extend(hit[1])
            if len(self.idx) > self.max_rows:
                raise OverCap(f"{self.path}: its unwind table has more than {self.max_rows} rows "
                              f"(max_unwind_rows): refused")

    def _add_native(self, lib: object, data: bytes, addr: int, is_eh: bool,
                    skip: tuple[np.ndarray, np.ndarray] | None) -> None:
        """add_section's rows from cfi_rows.c: the same rows, the states compiled into rules in the order
        their rows first come (as the FDE loop above numbers them), the rules of skipped FDEs' states left out."""
        a = self.arch
        with native_rows.section_rows(lib, data, addr, is_eh, a.fp_reg, a.ra_reg, skip,  # type: ignore[arg-type]
                                      self.max_rows - len(self.idx)) as r:
            self.errors.extend(["malformed CFI record"] * r.errors)
            lut = np.zeros(len(r.state_tuples), np.uint32)
            used = np.flatnonzero(r.first != np.iinfo(np.uint64).max)
            for sid in used[np.argsort(r.first[used])]:
                lut[sid] = self._rule(r.state_tuples[int(sid)])
            self.fdes += len(r.begins)
            # straight from the C's arrays (the buffer protocol: one copy each)
            self.begins.frombytes(_raw(r.begins))
            self.ends.frombytes(_raw(r.ends))
            self.counts.frombytes(_raw(r.counts))
            self.rel.frombytes(_raw(r.rel))
            self.idx.frombytes(_raw(lut[r.states]))
            over = r.over_cap
        if over or len(self.idx) > self.max_rows:
            raise OverCap(f"{self.path}: its unwind table has more than {self.max_rows} rows "
                          f"(max_unwind_rows): refused")

    def ranges(self) -> tuple[np.ndarray, np.ndarray]:
        begins = np.frombuffer(self.begins, np.uint64)
        order = np.argsort(begins, kind="stable")
        return begins[order], np.frombuffer(self.ends, np.uint64)[order]

    def finish(self, build_id: str | None) -> UnwindTable:
        rules = list(self.rule_index)
        if not len(self.begins):
            return empty_table(self.arch.name, build_id)
        begins = np.frombuffer(self.begins, np.uint64)
        ends = np.frombuffer(self.ends, np.uint64)
        base = int(begins.min())
        span = int(ends.max()) - base
        if span >= MAX_TABLE_SPAN:
            raise CfiError(f"FDEs span {span:#x} bytes: more than 32-bit row offsets allow")
        # 32-bit offsets from base from here on: libtorch_cpu has 2.6M rows
        b32 = (begins - np.uint64(base)).astype(np.uint32)
        e32 = (ends - np.uint64(base)).astype(np.uint32)
        counts = np.frombuffer(self.counts, np.uint64).astype(np.intp)
        rel = np.frombuffer(self.rel, np.uint32)
        inside = rel < np.repeat(e32 - b32, counts)  # advance_loc past the FDE's end
        pcs = np.repeat(b32, counts)[inside] + rel[inside]
        infos = np.frombuffer(self.idx, np.uint32)[inside]
        # A CFA_NONE row at every FDE end; a row of an FDE starting there sorts after it and wins.
        pcs = np.concatenate([e32, pcs])
        infos = np.concatenate([np.zeros(len(e32), np.uint32), infos])
        key = pcs.astype(np.uint64) << np.uint64(1)
        key[len(e32) :] |= np.uint64(1)
        order = np.argsort(key, kind="stable")
        del key
        pcs, infos = pcs[order], infos[order]
        del order
        last_at_pc = np.ones(len(pcs), bool)
        last_at_pc[:-1] = pcs[1:] != pcs[:-1]
        pcs, infos = pcs[last_at_pc], infos[last_at_pc]
        changed = np.ones(len(pcs), bool)
        changed[1:] = infos[1:] != infos[:-1]
        pcs, infos = pcs[changed], infos[changed]
        unsupported = self.rule_index.get(INFO_UNSUPPORTED, -1)
        stats: dict[str, float] = {
            "fdes": self.fdes,
            "rows": len(pcs),
            "rules": len(rules),
            "errors": len(self.errors),
            "unsupported_rows": int((infos == unsupported).sum()),
        }
        if len(rules) <= 1 << 16:
            infos = infos.astype(np.uint16)  # 6 bytes a row in memory
        return UnwindTable(self.arch.name, base, pcs, infos, rules, build_id, stats)


def _raw(a: np.ndarray) -> memoryview:
    """A contiguous array's bytes, without a copy."""
    return memoryview(np.ascontiguousarray(a)).cast("B")


def _overlaps(ranges: tuple[np.ndarray, np.ndarray], begin: int, end: int) -> bool:
    begins, ends = ranges
    i = int(np.searchsorted(begins, end, side="left")) - 1  # last range starting before end
    return i >= 0 and int(ends[i]) > begin


def build_table(path: str, max_rows: int | None = None, native: bool = True) -> UnwindTable:
    """Builds the table of an ELF file (raises ElfError / CfiError / OSError, OverCap over a cap). native: its
    rows from cfi_rows.c where that is built (native_rows.py), else interpreted in Python."""
    t0 = time.perf_counter()
    with ElfFile(path) as f:
        arch = arch_for_machine(f.machine)
        build_id = f.build_id()
        eh = f.section_data(".eh_frame")
        eh_addr = f.sections[".eh_frame"].addr if eh is not None else 0
        debug = f.section_data(".debug_frame")
    b = _Builder(arch, max_rows, path, native)
    if eh:
        b.add_section(0, eh, eh_addr, True, None)
    if debug:
        # .debug_frame fills in only what .eh_frame does not describe
        b.add_section(1, debug, 0, False, b.ranges() if len(b.begins) else None)
    table = b.finish(build_id)
    table.stats["build_seconds"] = time.perf_counter() - t0
    return table
