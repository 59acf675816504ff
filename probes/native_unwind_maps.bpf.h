/* The native unwinder's three large arrays, exported once per daemon (probes/unwind_maps.py) for every
 * program compiled with NATIVE_SHARED_TABLES (native_unwind.bpf.h declares them "extern" there): a BPF
 * module of maps only. Settings (-D): NATIVE_MAX_ROWS, NATIVE_MAX_PAGES, NATIVE_MAX_INFOS. */
#include "native_unwind.h"

/* bcc's BPF_TABLE_PUBLIC, with the flags it cannot take: the "maps/export" section names the table to
 * the process's other modules */
#define NATIVE_EXPORTED(_type, _key, _leaf, _name, _entries, _flags) \
    BPF_F_TABLE(_type, _key, _leaf, _name, _entries, _flags);      \
    __attribute__((section("maps/export"))) struct _name##_table_t __##_name

NATIVE_EXPORTED("array", int, struct native_unwind_row, native_rows, NATIVE_MAX_ROWS, BPF_F_MMAPABLE);
NATIVE_EXPORTED("array", int, __u32, native_pages, NATIVE_MAX_PAGES, BPF_F_MMAPABLE);
NATIVE_EXPORTED("array", int, struct native_unwind_info, native_infos, NATIVE_MAX_INFOS, 0);
