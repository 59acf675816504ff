"""Native addresses to frames: /proc/<pid>/maps + ELF symbol tables, cached per file across processes."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Set as AbstractSet

from deepctx.host.demangle import demangle
from deepctx.host.elf.symbols import ElfSymbols
from deepctx.host.file_cache import FileCache
from deepctx.host.frames import UNMAPPED, UNWIND_LOST, Frame
from deepctx.host.procfs import AddressSpace, Mapping, open_mapped_file
from deepctx.host.torch_ops import BINDING, ENTRY, STUB, TORCH_LIBRARY, OperatorNames, operator_frame


class SymbolCache:
    """ELF symbol tables in the daemon's per-file cache (host/file_cache.py), by file identity (build id or
    content hash): a library mapped by ten processes, or the same build in two containers, is read once,
    and a library replaced at its path is read again. Held under the cache's budget, least recently used
    out; a file that cannot be read is remembered too (as None)."""

    def __init__(self, max_files: int = 512, files: FileCache | None = None) -> None:
        # the daemon passes its shared cache; one of its own otherwise (tests), of max_files entries
        self.files = files if files is not None else FileCache(max_entries=max_files)
        self._lock = threading.Lock()
        self.loads = 0  # files actually parsed (tests check that sharing works)
        self.failures = 0

    def get(self, pid: int, m: Mapping) -> ElfSymbols | None:
        try:
            path = open_mapped_file(pid, m)
            ident = self.files.identify(path)
        except OSError:
            self._count_failure()
            return None
        self.files.note_use(KIND, ident, m.path)
        return self.files.get(ident, KIND, lambda: self._load(path), _nbytes)

    def build_ahead(self, path: str, ident: str) -> bool:
        """Builds the table of the file at path (a descriptor the prewarm opened and checked to be of
        identity ident) into the per-file cache, as get() would; no use is recorded. Whether it was built."""
        if self.files.holds(ident, KIND):
            return False
        return self.files.get(ident, KIND, lambda: self._load(path), _nbytes) is not None

    def _load(self, path: str) -> ElfSymbols | None:
        try:
            syms = ElfSymbols(path)
        except Exception:  # unreadable or not ELF (ElfError), or any other surprise: no names from it
            self._count_failure()
            return None
        with self._lock:
            self.loads += 1
        return syms

    def _count_failure(self) -> None:
        with self._lock:
            self.failures += 1


KIND = "symbols"  # entries of the per-file cache


def _nbytes(syms: ElfSymbols | None) -> int:
    return syms.memory if syms is not None else sys.getsizeof(None)


def module_name(m: Mapping | None) -> str:
    if m is None:  # an address no mapping of the process held when its maps were read
        return UNMAPPED
    if not m.path:
        return "[anon]"
    # an injected agent is mapped from a memfd: "/memfd:libdeepctx_cupti.so (deleted)"
    return os.path.basename(m.path.removesuffix(" (deleted)")).removeprefix("memfd:")


class NativeSymbolizer:
    """One per capture: frames are cached by address, since thousands of stacks share their frames."""

    def __init__(self, cache: SymbolCache) -> None:
        self.cache = cache
        # the tables this capture used, held for its life: an entry the shared cache evicts meanwhile is
        # not read again for every address (and the cache finds it here through a weak reference)
        self._files: dict[tuple[int, int, str, int], ElfSymbols | None] = {}
        self._frames: dict[tuple[int, int], Frame] = {}
        self._not_code: set[tuple[int, int]] = set()  # return addresses - 1 found outside executable memory
        self.stacks_cut = 0  # native stacks whose walk left executable memory (see symbolize_stack)
        # PyTorch operator entries (at::_ops::<op>::call/redispatch) -> the op frame that stands above them
        self.operators = OperatorNames(cache.files)
        self._op_of: dict[Frame, Frame] = {}
        self._provisional: set[Frame] = set()  # operators named by a binding: a nearer frame may name them better

    def symbolize(self, pid: int, space: AddressSpace, addr: int) -> Frame:
        """A native frame for an exact code address (callers pass return addresses minus one)."""
        key = (pid, addr)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._frames[key] = self._symbolize(pid, space, addr)
        return frame

    def _symbolize(self, pid: int, space: AddressSpace, addr: int) -> Frame:
        m = space.find(addr)
        mod = module_name(m)
        if m is None or not m.file_backed:
            return Frame("native", f"{mod}+{addr:#x}" if m is None else f"{mod}+{addr - m.start:#x}", module=mod)
        syms, vaddr = self._vaddr(pid, m, addr)
        if syms is None or vaddr is None:
            return Frame("native", f"{mod}+{addr - m.start + m.offset:#x}", module=mod)
        hit = syms.lookup(vaddr)
        if hit is None:
            return Frame("native", f"{mod}+{vaddr:#x}", module=mod)
        frame = Frame("native", demangle(hit[0]), module=mod)
        if frame not in self._op_of:
            self._operator(pid, space, m, frame)
        return frame

    def _vaddr(self, pid: int, m: Mapping, addr: int) -> tuple[ElfSymbols | None, int | None]:
        """The symbol table of a file-backed mapping (read once per capture) and addr's address in it."""
        fk = (pid, m.start, *m.file_key)
        if fk in self._files:
            syms = self._files[fk]
        else:
            syms = self._files[fk] = self.cache.get(pid, m)
        return syms, syms.file_offset_to_vaddr(addr - m.start + m.offset) if syms is not None else None

    def _operator(self, pid: int, space: AddressSpace, m: Mapping, frame: Frame) -> None:
        """Notes the operator frame to stand above a PyTorch operator's entry, registered kernel or binding."""
        found = operator_frame(frame.name)
        if found is None:
            return
        struct, source = found
        # the schemas are in libtorch_cpu.so: the entry's own library, or the one the process maps beside a
        # wrapper's (libtorch_cuda.so) or a binding's (libtorch_python.so)
        lib = m if source == ENTRY else next((x for x in space.mappings if x.file_backed
                                              and module_name(x).startswith(TORCH_LIBRARY)), None)
        path = _path(pid, lib) if lib is not None else None
        name = self.operators.name(struct, path, source)
        if name is None:
            return
        op = self._op_of[frame] = Frame("op", name, module=frame.module)
        if source in (BINDING, STUB):  # named less exactly: a nearer (or, for a stub, outer) entry says more
            self._provisional.add(op)

    def function_offset(self, pid: int, space: AddressSpace, addr: int) -> tuple[str, int] | None:
        """(symbol, offset into it) of an exact code address, or None where no symbol covers it."""
        m = space.find(addr)
        if m is None or not m.file_backed:
            return None
        syms, vaddr = self._vaddr(pid, m, addr)
        return syms.lookup(vaddr) if syms is not None and vaddr is not None else None

    def symbolize_stack(self, pid: int, space: AddressSpace, ips_leaf_first: list[int]) -> list[Frame]:
        """Frames outermost first. Every IP but the leaf is a return address: look up ip-1, the call.
        A return address outside executable memory (the heap, no mapping at all) means the walk went
        astray: a frame-pointer walk through code built without frame pointers reads a stack slot that is
        not a return address. It and every frame outward are garbage, different at every call, so they
        make no path anyone can read and thousands of one-off branches: one UNWIND_LOST frame stands for
        them (counted in `stacks_cut`)."""
        frames = [self.symbolize(pid, space, ips_leaf_first[0])] if ips_leaf_first else []
        known, not_code = self._frames, self._not_code
        for ip in ips_leaf_first[1:]:
            key = (pid, ip - 1)
            frame = known.get(key)  # a symbolized address is code: one lookup per return address seen before
            if frame is None:
                if key in not_code or not self._in_code(space, ip - 1):
                    not_code.add(key)
                    frames.append(UNWIND_LOST)
                    self.stacks_cut += 1
                    break
                frame = self.symbolize(pid, space, ip - 1)
            frames.append(frame)
        frames.reverse()
        return with_operators(frames, self._op_of, self._provisional) if self._op_of else frames

    def _in_code(self, space: AddressSpace, addr: int) -> bool:
        m = space.find(addr)
        return m is not None and m.executable


def _path(pid: int, m: Mapping) -> str | None:
    try:
        return open_mapped_file(pid, m)
    except OSError:
        return None


def with_operators(frames: list[Frame], op_of: dict[Frame, Frame],
                   provisional: AbstractSet[Frame] = frozenset()) -> list[Frame]:
    """Frames outermost first, with an operator frame above each operator's first entry frame: `aten::mm`
    above `at::_ops::mm::call`, and not again above the `redispatch` frames that pass the same call from one
    dispatch key to the next (autograd to CUDA), nor above the kernel its key registered
    (`wrapper_CUDA_mm`), nor above a stub kernel named for it (`aten::mul` of mul_kernel_cuda inside
    `aten::mul.Tensor`). A different operator called inside it gets its own. An operator named by its Python
    binding (provisional: `aten::mul`) stays above the binding; an entry or a registered kernel of the same
    operator inside it names it instead (`aten::mul.Tensor`), in its place. A stub kernel's operator (provisional
    too) stands where no entry, wrapper or binding of the same operator is outside it."""
    out: list[Frame] = []
    current: Frame | None = None  # the operator whose entry frames run now, until a frame that is not native
    at = -1  # its index in out
    for f in frames:
        op = op_of.get(f)
        if op in provisional and current is not None and op.name == current.name.split(".", 1)[0]:
            op = None  # a less exact name of the operator that runs: a stub kernel's inside its entry
        if op is not None and (current is None or op.name != current.name):
            if current in provisional and op.name.split(".", 1)[0] == current.name:
                out[at] = op
            else:
                out.append(op)
                at = len(out) - 1
            current = op
        elif f.kind != "native":
            current = None
        out.append(f)
    return out
