/* The CUDA API calls the CUPTI agent follows: those that cause device work or wait for it. Their callbacks
 * announce correlation ids. Shared with bench/cupti_floor.c, which measures CUPTI's cost on the same calls. */
#ifndef DEEPCTX_CUPTI_TRACKED_H
#define DEEPCTX_CUPTI_TRACKED_H

#include <string.h>

static const char *const CUPTI_TRACKED[] = {
    "cudaLaunch", "cudaMemcpy", "cudaMemset", "cudaGraphLaunch", "cudaDeviceSynchronize",
    "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
    "cuLaunch", "cuMemcpy", "cuMemset", "cuGraphLaunch", "cuCtxSynchronize", "cuStreamSynchronize",
    "cuEventSynchronize", "cuStreamWaitEvent",
};

/* Is the API named `name` (CUPTI's callback name) one the agent follows? Host-function launches are not:
 * they run no device work. */
static inline int cupti_tracked(const char *name) {
    if (!name || strstr(name, "HostFunc"))
        return 0;
    for (size_t i = 0; i < sizeof(CUPTI_TRACKED) / sizeof(CUPTI_TRACKED[0]); i++) {
        if (strncmp(name, CUPTI_TRACKED[i], strlen(CUPTI_TRACKED[i])) == 0)
            return 1;
    }
    return 0;
}

#endif
