"""Python thread names (`threading.Thread(name="work_0")`) read from a target's memory, as py-spy does.

CPython's thread states carry no name; the `threading` module keeps one Thread object per thread in
`threading._active` (ident -> Thread), and each Thread its `_name` and `_native_id` (the OS thread id as
the target sees it). The module's globals are found through any frame of a function defined in
threading.py (a worker's `_bootstrap`, or a `join` the main thread waits in): a frame holds its globals.
Instance attributes live in a dict on 3.10, and in a values array whose keys the class shares from 3.11 on
(a "managed" dict; inline after the object on 3.13), which is why the offsets below differ per version.
Offsets are for x86-64, default (GIL) builds; tests/unit/python/test_thread_names.py reads live 3.10-3.13.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from deepctx.host.procfs import ProcessMemory
from deepctx.host.python.discovery import Interpreter
from deepctx.host.python.objects import read_unicode
from deepctx.host.python.threads import ThreadState, namespace_tids

MAX_FRAMES = 1024  # frames walked per thread looking for threading.py
MAX_ENTRIES = 1 << 16  # dict entries read: a larger count is garbage
MAX_THREADS = 4096

# PyTypeObject
TP_BASICSIZE = 32
TP_FLAGS = 168
TP_DICTOFFSET = 288
TPFLAGS_INLINE_VALUES = 1 << 2  # 3.13+
TPFLAGS_MANAGED_DICT = 1 << 4  # 3.11+
# PyDictObject
DICT_KEYS, DICT_VALUES = 32, 40


@dataclass(frozen=True)
class _Version:
    frame_globals: int  # frame -> f_globals
    ht_cached_keys: int | None  # PyHeapTypeObject -> the keys instances share (3.11+)
    values_header: int  # bytes before PyDictValues.values (3.13: capacity, size, embedded, valid)
    long_tagged: bool  # 3.12+: PyLongObject.lv_tag (digits << 3 | sign) instead of ob_size


_VERSIONS = {
    (3, 10): _Version(frame_globals=48, ht_cached_keys=None, values_header=0, long_tagged=False),
    (3, 11): _Version(frame_globals=8, ht_cached_keys=872, values_header=0, long_tagged=False),
    (3, 12): _Version(frame_globals=24, ht_cached_keys=880, values_header=0, long_tagged=True),
    (3, 13): _Version(frame_globals=24, ht_cached_keys=880, values_header=8, long_tagged=True),
}


class PyObjects:
    """Reads str keys, dicts, ints and instance attributes of one target's interpreter."""

    def __init__(self, mem: ProcessMemory, interp: Interpreter) -> None:
        self.mem = mem
        self.interp = interp
        self.lay = interp.layout
        self.v = _VERSIONS[interp.layout.version]
        self._names: dict[int, str | None] = {}  # str object address -> text (keys are interned: few)

    def text(self, addr: int) -> str | None:
        if addr not in self._names:
            try:
                self._names[addr] = read_unicode(self.mem, addr, self.lay)
            except MemoryError:
                self._names[addr] = None
        return self._names[addr]

    def _entries(self, keys: int) -> Iterator[tuple[int, int, int]]:
        """(index, key, value) of a keys object's entries; value is 0 in a split table (see values[index])."""
        mem = self.mem
        if self.lay.version >= (3, 11):
            head = mem.read(keys + 8, 24)
            log2_index, kind = head[1], head[2]
            n = int.from_bytes(mem.read(keys + 24, 8), "little", signed=True)
            base, size = keys + 32 + (1 << log2_index), (24 if kind == 0 else 16)
            key_at = 8 if kind == 0 else 0
        else:
            dk_size = mem.read_u64(keys + 8)
            n = int.from_bytes(mem.read(keys + 32, 8), "little", signed=True)
            width = 1 if dk_size <= 0xFF else 2 if dk_size <= 0xFFFF else 4 if dk_size <= 0xFFFFFFFF else 8
            base, size, key_at = keys + 40 + dk_size * width, 24, 8
        if not 0 <= n <= MAX_ENTRIES:
            raise MemoryError(f"not a dict's keys at {keys:#x}")
        data = mem.read(base, n * size) if n else b""
        for i in range(n):
            e = data[i * size:(i + 1) * size]
            yield (i, int.from_bytes(e[key_at:key_at + 8], "little"),
                   int.from_bytes(e[key_at + 8:key_at + 16], "little"))

    def _lookup(self, keys: int, values: int, name: str) -> int | None:
        for i, key, value in self._entries(keys):
            if key and self.text(key) == name:
                return self.mem.read_u64(values + self.v.values_header + 8 * i) if values else value
        return None

    def dict_get(self, d: int, name: str) -> int | None:
        """dict[name] for a dict object at d (combined or split table), None when absent."""
        return self._lookup(self.mem.read_u64(d + DICT_KEYS), self.mem.read_u64(d + DICT_VALUES), name)

    def attr(self, obj: int, name: str) -> int | None:
        """An instance attribute of a Python class's instance (the instance's own, not its class's)."""
        mem = self.mem
        tp = mem.read_u64(obj + self.lay.object_type)
        flags = mem.read_u64(tp + TP_FLAGS)
        if self.lay.version < (3, 11) or not flags & TPFLAGS_MANAGED_DICT:
            off = int.from_bytes(mem.read(tp + TP_DICTOFFSET, 8), "little", signed=True)
            d = mem.read_u64(obj + off) if off > 0 else 0
            return self.dict_get(d, name) if d else None
        assert self.v.ht_cached_keys is not None
        slot = mem.read_u64(obj - 24)  # the managed dict (3.11, 3.13), or dict-or-values (3.12)
        values = 0
        if self.lay.version == (3, 11):
            values = mem.read_u64(obj - 32)
        elif self.lay.version == (3, 12) and slot & 1:
            values, slot = slot + 1, 0  # tagged: the values pointer minus one
        elif self.lay.version >= (3, 13) and not slot and flags & TPFLAGS_INLINE_VALUES:
            values = obj + int.from_bytes(mem.read(tp + TP_BASICSIZE, 8), "little", signed=True)
            if not mem.read(values + 3, 1)[0]:  # 'valid' cleared: the values moved to a dict
                return None
        if slot and not values:
            return self.dict_get(slot, name)
        return self._lookup(mem.read_u64(tp + self.v.ht_cached_keys), values, name) if values else None

    def small_int(self, addr: int) -> int | None:
        """A non-negative int below 2**60 (thread ids), else None."""
        head = self.mem.read(addr + 16, 16)
        tag = int.from_bytes(head[:8], "little", signed=not self.v.long_tagged)
        if self.v.long_tagged:
            if tag & 3 == 1:
                return 0
            if tag & 3:
                return None
            ndigits = tag >> 3
        else:
            ndigits = tag
        if not 0 <= ndigits <= 2:
            return None
        # the first two 30-bit digits follow the size word
        return sum(int.from_bytes(head[8 + 4 * i:12 + 4 * i], "little") << (30 * i) for i in range(ndigits))


def _frames(mem: ProcessMemory, interp: Interpreter, tstate: int) -> Iterator[int]:
    """A thread's frames, innermost first (shim frames of 3.12+ left out)."""
    lay = interp.layout
    frame = mem.read_u64(tstate + lay.tstate_frame)
    if frame and lay.cframe_current is not None:
        frame = mem.read_u64(frame + lay.cframe_current)
    for _ in range(MAX_FRAMES):
        if not frame:
            return
        owner = mem.read(frame + lay.frame_owner, 1)[0] if lay.frame_owner is not None else 0
        if lay.owner_shim is None or owner < lay.owner_shim:
            yield frame
        frame = mem.read_u64(frame + lay.frame_previous)


def threading_globals(objs: PyObjects, states: Mapping[int, ThreadState]) -> int | None:
    """The threading module's globals dict, from a frame of a function in threading.py on any thread."""
    mem, interp, lay = objs.mem, objs.interp, objs.lay
    for st in states.values():
        try:
            for frame in _frames(mem, interp, st.tstate):
                code = mem.read_u64(frame + lay.frame_code) & ~7
                if mem.read_u64(code + lay.object_type) != interp.code_type:
                    continue
                filename = objs.text(mem.read_u64(code + lay.code_filename)) or ""
                if filename.endswith("/threading.py") or filename == "threading.py":
                    return mem.read_u64(frame + objs.v.frame_globals)
        except MemoryError:
            continue
    return None


def read_thread_names(mem: ProcessMemory, interp: Interpreter, states: Mapping[int, ThreadState]) -> dict[int, str]:
    """Host tid -> the Python name of each thread `threading` knows ({} when the threading module's globals
    cannot be found: no thread is in threading.py's code, or the target imports no threading)."""
    if interp.layout.version not in _VERSIONS:
        return {}
    objs = PyObjects(mem, interp)
    globals_ = threading_globals(objs, states)
    if not globals_:
        return {}
    ns = namespace_tids(interp.pid)
    out: dict[int, str] = {}
    try:
        active = objs.dict_get(globals_, "_active")
        if not active:
            return {}
        for n, (_, key, thread) in enumerate(objs._entries(mem.read_u64(active + DICT_KEYS))):
            if n >= MAX_THREADS:
                break
            if not key or not thread:
                continue
            try:
                name_obj, native_obj = objs.attr(thread, "_name"), objs.attr(thread, "_native_id")
                name = objs.text(name_obj) if name_obj else None
                native = objs.small_int(native_obj) if native_obj else None
            except MemoryError:
                continue  # a thread object freed under us: the others still name their threads
            host = ns.get(native) if native is not None else None
            if name and host is not None:
                out[host] = name
    except MemoryError:
        return out
    return out
