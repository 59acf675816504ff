"""Native symbolization on real ELF files: libc and a test library with known symbols."""

from __future__ import annotations

import ctypes
import subprocess
import types
from pathlib import Path

import pytest

from deepctx.daemon.symbolize.native import NativeSymbolizer, SymbolCache
from deepctx.host.demangle import demangle
from deepctx.host.elf.symbols import ElfSymbols
from deepctx.host.procfs import AddressSpace, Mapping, read_maps


def nm_symbols(path: Path) -> dict[str, tuple[int, int]]:
    """name -> (address, size) as binutils' nm sees them (the reference the tests compare with)."""
    out = subprocess.run(["nm", "-S", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            syms[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return syms


@pytest.fixture(scope="module")
def libknown(native_targets: Path) -> Path:
    return native_targets / "libknown.so"


def test_known_library_symbols_resolve_to_their_names(libknown: Path) -> None:
    syms = ElfSymbols(str(libknown))
    ref = nm_symbols(libknown)
    for name in ("known_alpha", "known_beta", "_ZN12deepctx_test6Widget4spinEl", "_ZL13hidden_helperi"):
        addr, size = ref[name]
        assert syms.lookup(addr) == (name, 0)
        assert syms.lookup(addr + size - 1) == (name, size - 1)


def test_address_between_functions_has_no_symbol(libknown: Path) -> None:
    syms = ElfSymbols(str(libknown))
    ref = nm_symbols(libknown)
    alpha_addr, alpha_size = ref["known_alpha"]
    gap = alpha_addr + alpha_size  # padding before known_beta
    assert gap < ref["known_beta"][0]
    assert syms.lookup(gap) is None


def test_a_library_defining_no_function_has_an_empty_table(tmp_path: Path) -> None:
    """Its symbol tables exist but keep nothing (data and undefined symbols only): no names, no error."""
    (tmp_path / "d.c").write_text("int data_only = 1;\n")
    lib = tmp_path / "libdata.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "d.c")], check=True)
    subprocess.run(["strip", str(lib)], check=True)  # .dynsym only: data_only and undefined symbols
    syms = ElfSymbols(str(lib))
    assert len(syms) == 0
    assert syms.lookup(0x1000) is None
    assert syms.addresses_of({"data_only"}) == {}


def test_symbols_take_12_bytes_each_and_resolve_alike_when_wide(libknown: Path) -> None:
    """Addresses as 32-bit offsets, 32-bit sizes and names: 12 bytes a symbol; a file whose symbols span
    4 GiB or more keeps 64-bit addresses, and resolves the same."""
    import numpy as np

    syms = ElfSymbols(str(libknown))
    ref = nm_symbols(libknown)
    assert (syms.addrs.dtype, syms.sizes.dtype, syms.names.dtype) == (np.uint32,) * 3
    assert syms.addrs.nbytes + syms.sizes.nbytes + syms.names.nbytes == 12 * len(syms) < syms.memory
    wide = ElfSymbols(str(libknown))
    far = np.uint64(1 << 33)
    a = np.concatenate([wide.addrs.astype(np.uint64) + np.uint64(wide._base), [far]])
    s = np.concatenate([wide.sizes.astype(np.uint64), [np.uint64(16)]])
    packed = wide.names.astype(np.int64)
    n = (packed & ((1 << 31) - 1)) | ((packed >> 31) << 40)
    wide.addrs, wide.sizes, wide.names = wide._compact(a, s, np.concatenate([n, n[:1]]))
    assert wide.addrs.dtype == np.uint64 and wide._base == 0
    for name in ("known_alpha", "known_beta"):
        addr, size = ref[name]
        assert wide.lookup(addr + size - 1) == syms.lookup(addr + size - 1) == (name, size - 1)
    assert wide.lookup(int(far) + 3)[1] == 3 and wide.addresses_of({"known_beta"}) == {"known_beta": ref["known_beta"][0]}


def mapping_rss_kb(data: object) -> int:
    """Resident kB of the mapping that holds the buffer's first byte (/proc/self/smaps)."""
    import numpy as np

    addr = np.frombuffer(data, np.uint8).ctypes.data  # type: ignore[call-overload]
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(v, 16) for v in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "Rss:":
            return int(line.split()[1])
    raise AssertionError(f"no mapping holds {addr:#x}")


def test_the_symbol_tables_pages_leave_the_resident_set_once_read(libknown: Path) -> None:
    """libtorch's symbol and string tables left ~100 MB of file pages in deepctxd's RSS: after indexing and
    after a search by name the pages are dropped, and later look-ups read them again."""
    syms = ElfSymbols(str(libknown))
    assert mapping_rss_kb(syms._data) == 0
    alpha = nm_symbols(libknown)["known_alpha"][0]
    assert syms.addresses_of({"known_alpha"}) == {"known_alpha": alpha}
    assert syms.addresses_with_prefix("known_") == {"known_alpha": alpha, "known_beta": nm_symbols(libknown)["known_beta"][0]}
    assert mapping_rss_kb(syms._data) == 0
    assert syms.lookup(alpha) == ("known_alpha", 0) and mapping_rss_kb(syms._data) > 0


def test_build_id_matches_readelf(libknown: Path) -> None:
    out = subprocess.run(["readelf", "-n", str(libknown)], capture_output=True, text=True, check=True).stdout
    want = out.split("Build ID:")[1].split()[0]
    assert ElfSymbols(str(libknown)).build_id == want


def test_libc_dynamic_symbols_match_the_loaded_library() -> None:
    libc = ctypes.CDLL("libc.so.6")
    here = AddressSpace(read_maps(__import__("os").getpid()))
    addr = ctypes.cast(libc.malloc, ctypes.c_void_p).value
    assert addr is not None
    frame = NativeSymbolizer(SymbolCache()).symbolize(__import__("os").getpid(), here, addr)
    assert frame.module == "libc.so.6"
    assert frame.name in ("malloc", "__libc_malloc")


def test_demangles_cpp_names() -> None:
    assert demangle("_ZN12deepctx_test6Widget4spinEl") == "deepctx_test::Widget::spin(long)"
    assert demangle("_ZL13hidden_helperi") == "hidden_helper(int)"
    assert demangle("known_alpha") == "known_alpha"
    assert demangle("_Znot_a_real_mangling") == "_Znot_a_real_mangling"


def test_loaded_library_symbolizes_and_is_cached_once_per_file(libknown: Path) -> None:
    lib = ctypes.CDLL(str(libknown))
    pid = __import__("os").getpid()
    space = AddressSpace(read_maps(pid))
    cache = SymbolCache()
    sym = NativeSymbolizer(cache)
    spin = ctypes.cast(lib._ZN12deepctx_test6Widget4spinEl, ctypes.c_void_p).value
    alpha = ctypes.cast(lib.known_alpha, ctypes.c_void_p).value
    f1 = sym.symbolize(pid, space, spin + 3)
    f2 = sym.symbolize(pid, space, alpha)
    assert f1.name == "deepctx_test::Widget::spin(long)" and f1.module == "libknown.so"
    assert f2.name == "known_alpha"
    assert cache.loads == 1
    # The same file seen by another process (same dev, inode) is not read again.
    m = space.find(alpha)
    assert m is not None
    other = Mapping(m.start + 0x100000, m.end + 0x100000, m.perms, m.offset, m.dev, m.inode, m.path)
    f3 = sym.symbolize(pid, AddressSpace([other]), alpha + 0x100000)
    assert f3.name == "known_alpha"
    assert cache.loads == 1


def test_unknown_addresses_become_module_plus_offset() -> None:
    anon = Mapping(0x7000_0000, 0x7001_0000, "r-xp", 0, "00:00", 0, "")
    f = NativeSymbolizer(SymbolCache()).symbolize(1, AddressSpace([anon]), 0x7000_0123)
    assert f.name == "[anon]+0x123"
    f = NativeSymbolizer(SymbolCache()).symbolize(1, AddressSpace([anon]), 0x9000_0000)
    assert f.name == "[unmapped]+0x90000000"


def test_stack_uses_call_site_for_return_addresses(libknown: Path) -> None:
    """Every frame but the leaf holds a return address; a call as the last instruction of a function
    returns to the next function's first byte, so the symbolizer must look up ip-1."""
    lib = ctypes.CDLL(str(libknown))
    pid = __import__("os").getpid()
    space = AddressSpace(read_maps(pid))
    sym = NativeSymbolizer(SymbolCache())
    beta = ctypes.cast(lib.known_beta, ctypes.c_void_p).value
    alpha = ctypes.cast(lib.known_alpha, ctypes.c_void_p).value
    # Leaf exactly at known_beta's first byte; a return address equal to known_beta's start belongs
    # to the function before it.
    frames = sym.symbolize_stack(pid, space, [beta, beta])
    assert [f.name for f in frames] == [sym.symbolize(pid, space, beta - 1).name, "known_beta"]
    assert frames[0].name != "known_beta"
    assert alpha < beta


def known_with_heap(libknown: Path) -> tuple[int, int, int, AddressSpace]:
    """(this pid, known_alpha's and known_beta's addresses, this process's space plus a heap at 0x5000_0000)."""
    lib = ctypes.CDLL(str(libknown))
    pid = __import__("os").getpid()
    beta = ctypes.cast(lib.known_beta, ctypes.c_void_p).value
    alpha = ctypes.cast(lib.known_alpha, ctypes.c_void_p).value
    assert alpha is not None and beta is not None
    heap = Mapping(0x5000_0000, 0x5010_0000, "rw-p", 0, "00:00", 0, "")
    return pid, alpha, beta, AddressSpace([*read_maps(pid), heap])


def test_stack_is_cut_where_the_walk_left_executable_memory(libknown: Path) -> None:
    """A return address in the heap (or in no mapping) is a stack slot a frame-pointer walk misread: it
    and every frame beyond it become one UNWIND_LOST frame, counted; the real inner frames stay."""
    from deepctx.host.frames import UNWIND_LOST

    pid, alpha, beta, space = known_with_heap(libknown)
    sym = NativeSymbolizer(SymbolCache())
    # leaf, a real caller, a heap "return address", then more garbage in code and outside any mapping
    frames = sym.symbolize_stack(pid, space, [beta, alpha + 5, 0x5000_1234, beta + 1, 0x10])
    assert [f.name for f in frames] == [UNWIND_LOST.name, "known_alpha", "known_beta"]
    assert sym.stacks_cut == 1
    assert [f.name for f in sym.symbolize_stack(pid, space, [beta, 0x10])] == [UNWIND_LOST.name, "known_beta"]
    assert sym.stacks_cut == 2
    # anonymous *executable* memory (JIT code) is code: kept, as [anon]+offset
    jit = Mapping(0x6000_0000, 0x6001_0000, "r-xp", 0, "00:00", 0, "")
    frames = sym.symbolize_stack(pid, AddressSpace([*read_maps(pid), jit]), [beta, 0x6000_0101])
    assert [f.name for f in frames] == ["[anon]+0x100", "known_beta"]
    assert sym.stacks_cut == 2


def test_stack_ids_that_resolve_alike_share_one_path_and_one_tree_walk(libknown: Path) -> None:
    """Ids whose walks differ only past the cut (garbage, new at every call) or whose Python stacks name
    the same lines stand for one stack: one path built, one caller node walked; a different stack stays
    apart."""
    from deepctx.daemon.callpaths import CallPathResolver
    from deepctx.daemon.gpu_tree import caller_node
    from deepctx.daemon.origins import Origins
    from deepctx.daemon.tree import CallTree, PathNodes
    from deepctx.host.frames import UNWIND_LOST, Frame
    from deepctx.host.python.pyframe import PyFrameInfo
    from deepctx.probes.gpu_api import GPU_KEY_F_SAMPLED

    pid, alpha, beta, space = known_with_heap(libknown)
    stacks = {1: [beta, alpha + 5, 0x5000_1234, 0x10], 2: [beta, alpha + 5, 0x5000_9990, 0x77],
              3: [beta, alpha + 3, 0x5000_4444], 4: [alpha + 5]}
    line = {7: PyFrameInfo(Frame("python", "step", file="train.py", line=7), True)}
    py = {70: [line[7]], 71: [line[7]], 80: [PyFrameInfo(Frame("python", "step", file="train.py", line=8), True)]}
    reads: list[int] = []

    def read_stack(sid: int) -> tuple[list[int], bool]:
        reads.append(sid)
        return stacks[sid], False

    r = CallPathResolver(pid, space, read_stack, NativeSymbolizer(SymbolCache()), {5: "main"},
                         read_python=lambda sid: py[sid])
    assert r.stack_key(2, 71, False) == (2, 71)  # first seen: stands for itself
    assert r.stack_key(1, 70, False) == (2, 71)
    assert r.stack_key(3, 70, False) == (2, 71)  # alpha+3 and alpha+5 are both in known_alpha
    assert r.stack_key(4, 80, False) == (4, 80)
    assert r.stack_key(1, 0, True) == (0, 0)  # a lost stack reads nothing
    assert sorted(reads) == [1, 2, 3, 4]
    names = [f.name for f in r.path(5, 1, 70, False)]
    assert names == ["main", "step", UNWIND_LOST.name, "known_alpha", "known_beta"]  # no interpreter frames: Python outermost
    assert r.path(5, 2, 71, False) == r.path(5, 1, 70, False)
    paths, walks = PathNodes(CallTree("t")), []

    def node(sid: int, py_sid: int) -> int:
        b = types.SimpleNamespace(tid=5, user_stack=sid, py_stack=py_sid, origin_tid=0, origin_user_stack=0,
                                  origin_py_stack=0, origin_label=0, origin_node=0)
        return caller_node(paths, r, Origins(), b, GPU_KEY_F_SAMPLED, "lib", lambda f: walks.append(f) and False)

    assert node(1, 70) == node(2, 71) == node(3, 70) != node(4, 80)
    assert len(walks) == 2  # the callee test ran on the innermost frame of two paths, not of four
