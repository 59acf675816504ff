"""Reading BPF maps from user space."""

from __future__ import annotations

import ctypes as ct
import errno
from collections.abc import Callable
from typing import Any

from deepctx.probes.program_share import pid_of, share_of

RAW_BATCH = 4096  # entries a lookup-batch syscall returns at most (raw_items)


def items(table: Any) -> list[tuple[Any, Any]]:
    """All entries of a hash map: one batch syscall where the kernel has it (5.6+), else key by key."""
    try:
        return list(table.items_lookup_batch())
    except Exception:
        return list(table.items())


def raw_items(table: Any) -> list[tuple[bytes, bytes]]:
    """All entries of a hash map as (key bytes, value bytes), for readers that decode with struct: one
    batch syscall per RAW_BATCH entries into two flat buffers, sliced, where bcc's own batch read builds two
    ctypes objects per entry (which bytes() then copies) in arrays of the map's full size. Key by key where
    the kernel has no batch lookup (before 5.6) or a batch fails."""
    return _raw_batches(table, delete=False)


def take_raw_items(table: Any) -> list[tuple[bytes, bytes]]:
    """As raw_items, and each entry is deleted as it is read (BPF_MAP_LOOKUP_AND_DELETE_BATCH: a hash
    bucket at a time, under its lock), so that what BPF adds after the read starts a new entry instead of
    being wiped by a later clear(). Key by key (read, then delete) where the kernel has no batch ops."""
    return _raw_batches(table, delete=True)


def _raw_batches(table: Any, delete: bool) -> list[tuple[bytes, bytes]]:
    from bcc.libbcc import lib

    batch = lib.bpf_lookup_and_delete_batch if delete else lib.bpf_lookup_batch
    ks, vs = ct.sizeof(table.Key), ct.sizeof(table.Leaf)
    keys, values = ct.create_string_buffer(ks * RAW_BATCH), ct.create_string_buffer(vs * RAW_BATCH)
    token, count = ct.c_uint32(0), ct.c_uint32(0)
    out: list[tuple[bytes, bytes]] = []
    first = True
    while True:
        count.value = RAW_BATCH
        res = batch(table.map_fd, None if first else ct.byref(token), ct.byref(token), keys, values, ct.byref(count))
        err = ct.get_errno()
        if res != 0 and err != errno.ENOENT:  # no batch ops here, or a hash bucket over RAW_BATCH (ENOSPC)
            return (out if delete else []) + _key_by_key(table, delete)  # what a batch took is gone
        n = count.value
        kb, vb = keys.raw[:n * ks], values.raw[:n * vs]
        out.extend((kb[i * ks:(i + 1) * ks], vb[i * vs:(i + 1) * vs]) for i in range(n))
        if res != 0:  # ENOENT: that was the last of them
            return out
        first = False


def _key_by_key(table: Any, delete: bool) -> list[tuple[bytes, bytes]]:
    out = []
    for k, v in table.items():
        out.append((bytes(k), bytes(v)))
        if delete:
            try:
                del table[k]
            except KeyError:
                pass
    return out


DELETE_BATCH = 4096  # keys a BPF_MAP_DELETE_BATCH call deletes


def delete_keys(table: Any, keys: list[Any]) -> None:
    """Deletes these keys (the table's ctypes Key objects) in batches; one by one where the kernel has no
    batch ops (before 5.6) or a key went meanwhile."""
    for i in range(0, len(keys), DELETE_BATCH):
        chunk = keys[i:i + DELETE_BATCH]
        try:
            table.items_delete_batch((table.Key * len(chunk))(*chunk))
        except Exception:
            for k in chunk:
                try:
                    del table[k]
                except KeyError:
                    pass


def decoded(table: Any, raw: list[tuple[bytes, bytes]]) -> list[tuple[Any, Any]]:
    """Raw entries as the table's own ctypes key and value objects (as items() returns them)."""
    key, leaf = table.Key, table.Leaf
    return [(key.from_buffer_copy(k), leaf.from_buffer_copy(v)) for k, v in raw]


class CountsMap:
    """A BPF map of counts per key in two generations (counts_map.bpf.h: name_0 and name_1, behind a one-slot
    array of maps, name, that says which one the programs add to), as a profile reads it: whole at a
    capture's end; at a continuous window's cut, taken before the window is built, so that what the probes
    count while it is built goes to the next window.

    A take points the programs at the other generation; the kernel returns from that update only once every
    program that could still be adding to the old one has finished (synchronize_rcu), so the old generation
    is read and emptied with nothing writing to it. Read and deleted while the programs wrote to it, an add
    could fall between a program's lookup and its increment, and be lost or land in an entry reused for
    another key. One-shot captures (windows False) give the second generation one entry, and take nothing."""

    def __init__(self, name: str, windows: bool = False) -> None:
        self.name = name
        self.windows = windows
        self._taken: list[tuple[bytes, bytes]] | None = None

    def spare_entries(self, entries: int) -> int:
        """The second generation's size (the -D the family passes as its *_COUNT_SPARE)."""
        return entries if self.windows else 1

    def flags(self) -> str:
        """Both generations' map flags (*_COUNT_FLAGS) for a family whose programs may allocate (uprobes):
        where windows are cut, entries are allocated as keys appear, not all up front (two preallocated
        generations of 65,536 GPU calls' or device records' keys lock 25 and 29 MB per process)."""
        return "BPF_F_NO_PREALLOC" if self.windows else "0"

    def generation(self, bpf: Any) -> int:
        """The generation the programs add to now (kept with the program: captures that share it flip it
        for each other, probes/program_share.py)."""
        return share_of(bpf).generations.get(self.name, 0)

    def table(self, bpf: Any) -> Any:
        """The generation the programs add to now."""
        return bpf[f"{self.name}_{self.generation(bpf)}".encode()]  # bcc wants bytes

    def bind(self, bpf: Any) -> None:
        """Points the programs at the current generation, once per program before its first capture's probes
        attach (until then, every add finds no map and counts as a full one). A program that served a
        windowed capture before may point at the other generation: the pool's reset forgets it, and the
        first capture after points it at the first."""
        share = share_of(bpf)
        with share.lock:
            if self.name not in share.generations:
                share.generations[self.name] = 0
                self._point(bpf)

    def _point(self, bpf: Any) -> None:
        """The programs add to the current generation from now on. The kernel returns from this update once
        every program that may still hold the slot's old generation has finished (synchronize_rcu)."""
        bpf[self.name.encode()][ct.c_int(0)] = ct.c_int(self.table(bpf).get_fd())

    def take(self, bpf: Any, pid: int | None = None, cut: int | None = None) -> None:
        """pid's counts up to window cut `cut` leave the map: the first capture of the program at that cut
        flips the generation and reads the old one for all of them (program_share.py). Without a pid: every
        process's counts, for the one reader of the program."""
        if not self.windows:
            raise RuntimeError(f"{self.name}: a capture that cuts no windows has no second generation to take into")
        share = share_of(bpf)

        def flip_and_read() -> list[tuple[bytes, bytes]]:
            old = self.table(bpf)
            share.generations[self.name] = self.generation(bpf) ^ 1
            self._point(bpf)
            return take_raw_items(old)  # nothing adds to it any more: read and emptied in one pass

        if pid is None or cut is None:
            with share.lock:
                self._taken = flip_and_read()
        else:
            self._taken = share.take(self.name, cut, pid, flip_and_read)

    def release(self) -> None:
        """The taken window is built: later reads see the map again."""
        self._taken = None

    def raw(self, bpf: Any, pid: int | None = None) -> list[tuple[bytes, bytes]]:
        """The taken window's entries; else what the map holds now (every process's: readers keep their
        pid's), with pid's entries taken at cuts its capture ended before building."""
        if self._taken is not None:
            return self._taken
        rest = share_of(bpf).rest(self.name, pid) if pid is not None and self.windows else []
        return rest + raw_items(self.table(bpf))

    def items(self, bpf: Any, pid: int | None = None) -> list[tuple[Any, Any]]:
        return decoded(self.table(bpf), self.raw(bpf, pid))

    def forget(self, bpf: Any, pid: int) -> None:
        """pid's capture ends: where others on the program go on, its entries leave the map now (a map no take
        empties would keep them until the last one ends; after the last, the pool's reset empties it)."""
        if not share_of(bpf).users - {pid}:
            return
        table = self.table(bpf)
        delete_keys(table, [table.Key.from_buffer_copy(k) for k, _ in raw_items(table) if pid_of(k) == pid])


def clear_stacks(stacks: Any, generation: Any) -> None:
    """Empties an interned-stack map whose ids BPF programs also keep per CPU (the last stack a CPU interned or
    walked): the map's generation (slot 0 of a one-slot array) is raised first, so that no CPU takes an id it
    kept from before the clear for one still in the map."""
    generation[ct.c_int(0)] = ct.c_uint64(generation[ct.c_int(0)].value + 1)
    stacks.clear()


def entry_count(table: Any) -> int:
    return sum(1 for _ in table.keys())


def percpu_sum(table: Any, index: int) -> int:
    return int(sum(table[ct.c_int(index)]))


class RingSink:
    """A ring buffer's consumer, opened once per loaded program: bcc cannot take a ring's callback back, and
    the program outlives the capture (probes/programs.py), so each capture points fn at its own handler.
    Between captures fn drops what is left (drain_rings)."""

    def __init__(self, bpf: Any, name: str) -> None:
        self.fn: Callable[[Any, Any, int], None] = self.drop
        bpf[name.encode()].open_ring_buffer(lambda ctx, data, size: self.fn(ctx, data, size))

    @staticmethod
    def drop(ctx: Any, data: Any, size: int) -> None:
        pass


def ring_sink(bpf: Any, name: str) -> RingSink:
    """The consumer of the program's ring buffer `name`, opened at the first call."""
    sinks: dict[str, RingSink] | None = getattr(bpf, "deepctx_ring_sinks", None)
    if sinks is None:
        sinks = bpf.deepctx_ring_sinks = {}
    sink = sinks.get(name)
    if sink is None:
        sink = sinks[name] = RingSink(bpf, name)
    return sink


def drain_rings(bpf: Any) -> None:
    """Drops what every ring buffer opened on the program still holds (programs.reset_maps, between captures)."""
    sinks: dict[str, RingSink] | None = getattr(bpf, "deepctx_ring_sinks", None)
    if sinks:
        for sink in sinks.values():
            sink.fn = RingSink.drop
        bpf.ring_buffer_consume()


def table_names(module: Any) -> list[bytes]:
    """The names of a bcc module's maps, in bcc's order (the index is the map's id in bcc's table calls)."""
    from bcc.libbcc import lib

    lib.bpf_num_tables.restype = ct.c_size_t
    lib.bpf_num_tables.argtypes = [ct.c_void_p]
    lib.bpf_table_name.restype = ct.c_char_p
    lib.bpf_table_name.argtypes = [ct.c_void_p, ct.c_size_t]
    return [lib.bpf_table_name(module, i) for i in range(lib.bpf_num_tables(module))]
