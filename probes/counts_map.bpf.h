/* A counts map in two generations, for continuous mode's window cuts (probes/maps.py, CountsMap).
 *
 * Programs add to the generation that slot 0 of a one-slot array of maps points at. A cut points the slot at
 * the other generation; the kernel's update of an array of maps returns only after synchronize_rcu(), so
 * every program that could still hold an entry of the old generation (uprobes and perf events alike run
 * inside an RCU read section) has finished, and user space reads and empties it with nothing writing. Read
 * and deleted under the programs' feet instead (lookup-and-delete on a preallocated hash), an add made
 * between a program's lookup and its atomic add was lost, or landed in the entry reused for another key.
 *
 * COUNTS_MAP(name, key, value, entries, spare_entries, flags): name_0 and name_1 (spare_entries for the
 * second: 1 where the capture cuts no windows, so that one-shot captures pay no second map). flags: the
 * maps' (BPF_F_NO_PREALLOC where windows are cut, from programs that may allocate: two preallocated
 * generations of a GPU family's 65,536 entries would lock 25 to 29 MB per process).
 * counts_get(name.lookup(&slot 0), key, zero): the value for key in the current generation, added as zero if
 * missing; NULL when it is full (or before the loader pointed the slot at a generation). The caller looks the
 * slot up itself: bcc rewrites a map's .lookup() in the program's text, not inside a macro. */
#ifndef DEEPCTX_COUNTS_MAP_BPF_H
#define DEEPCTX_COUNTS_MAP_BPF_H

#define COUNTS_MAP(_name, _key, _val, _entries, _spare, _flags)        \
    BPF_F_TABLE("hash", _key, _val, _name##_0, _entries, _flags);       \
    BPF_F_TABLE("hash", _key, _val, _name##_1, _spare, _flags);         \
    BPF_ARRAY_OF_MAPS(_name, #_name "_0", 1)

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
static __always_inline void *counts_get(void *map, void *key, void *zero) {
    if (!map)
        return NULL;
    void *v = bpf_map_lookup_elem(map, key);
    if (v)
        return v;
    bpf_map_update_elem(map, key, zero, BPF_NOEXIST);  /* EEXIST: another CPU added it first */
    return bpf_map_lookup_elem(map, key);
}
#endif

#endif
