/* Cubins already in the process (native/cubin_scan.c): for PC samples of modules loaded before the agent
 * (attach). CUPTI hands a module's cubin over only in its MODULE_LOADED callback; it has no way to hand back
 * one loaded earlier (its MODULE activity kind "is not produced by the activity API", cupti_activity.h).
 * An uncompressed fatbin keeps each cubin as is, in the loaded object's segment (.nv_fatbin): found there. */
#ifndef DEEPCTX_CUBIN_SCAN_H
#define DEEPCTX_CUBIN_SCAN_H

#include <stddef.h>

struct cubin_span {
    const void *addr;  /* where the cubin (an EM_CUDA ELF image) is in this process */
    size_t size;       /* its whole size, from its headers */
};

/* Finds up to max cubins in the readable segments of the loaded objects; returns how many it wrote. */
int cubin_scan(struct cubin_span *out, int max);

/* Copies size bytes at addr of this process into dst without faulting if they are gone (an object
 * unloaded since the scan): 0 on success. */
int cubin_copy(void *dst, const void *addr, size_t size);

#endif
