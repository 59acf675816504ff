/* A mock CUDA runtime (libcudart.so.13) for CPU-only tests: the real entry points' names and
 * signatures (so deepctx's GPU API probes attach to them), each running the mock CUPTI's callbacks
 * with a correlation id and queuing activity records with known durations on the mock device:
 *   kernels: the duration registered with mockRegisterKernel (a launch goes through the mock driver's
 *            cuLaunchKernel, which announces a correlation id of its own, as a driver may);
 *   cudaMemcpy: 1 ns per byte; cudaMemset: 1 ns per byte; graph launches: each node's kernel under the
 *   launch's one correlation id, node ids 1, 2, ...; cudaDeviceSynchronize: a sync record that lasts
 *   until the device is idle. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>  /* with cuda_runtime_api.h: the real signatures */

#include "mock.h"

#define EXPORT __attribute__((visibility("default")))

struct graph {
    int n;
    const void *kernels[16];
};

static uint32_t enter(uint32_t cbid, const char *fn) {
    cuInit(0);
    return mockcupti_api_enter(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, fn, NULL);
}

static void leave(uint32_t cbid, uint32_t corr, const char *fn) {
    mockcupti_api_exit(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, corr, fn);
}

EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t smem,
                                    cudaStream_t stream) {
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    uint32_t corr = enter(cbid, "cudaLaunchKernel");
    int rc = (int)cuLaunchKernel((CUfunction)func, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                 (unsigned)smem, (CUstream)stream, args, NULL);
    leave(cbid, corr, "cudaLaunchKernel");
    return (cudaError_t)rc;
}

static uint8_t copy_kind(enum cudaMemcpyKind kind) {
    switch (kind) {
    case 0: return CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    case 1: return CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    case 2: return CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    case 3: return CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    default: return CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    }
}

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    (void)dst;
    (void)src;
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020;
    uint32_t corr = enter(cbid, "cudaMemcpy");
    uint64_t start = mock_device_run(count);
    mockcupti_memcpy(corr, count, copy_kind(kind), start, start + count, 0);
    leave(cbid, corr, "cudaMemcpy");
    return cudaSuccess;
}

EXPORT cudaError_t cudaMemset(void *ptr, int value, size_t count) {
    (void)ptr;
    (void)value;
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020;
    uint32_t corr = enter(cbid, "cudaMemset");
    uint64_t start = mock_device_run(count);
    mockcupti_memset(corr, count, start, start + count, 0);
    leave(cbid, corr, "cudaMemset");
    return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceSynchronize(void) {
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020;
    uint32_t corr = enter(cbid, "cudaDeviceSynchronize");
    uint64_t now = mockcupti_now(), idle = mock_device_idle_at();
    mockcupti_sync(corr, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, now, idle > now ? idle : now);
    leave(cbid, corr, "cudaDeviceSynchronize");
    return cudaSuccess;
}

EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000;
    uint32_t corr = enter(cbid, "cudaGraphLaunch");
    const struct graph *g = (const void *)exec;
    int rc = 0;
    for (int i = 0; g && i < g->n && !rc; i++)
        rc = mock_run_kernel(g->kernels[i], corr, (uint32_t)(uintptr_t)stream, (uint64_t)i + 1);
    leave(cbid, corr, "cudaGraphLaunch");
    return (cudaError_t)rc;
}

EXPORT cudaError_t cudaMalloc(void **ptr, size_t size) {
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020;
    uint32_t corr = enter(cbid, "cudaMalloc");
    *ptr = malloc(size ? size : 1);
    leave(cbid, corr, "cudaMalloc");
    return cudaSuccess;
}

/* A graph of up to 16 kernel launches, for cudaGraphLaunch. */
EXPORT void *mockGraphCreate(const void *const *kernels, int n) {
    struct graph *g = calloc(1, sizeof(*g));
    g->n = n > 16 ? 16 : n;
    memcpy(g->kernels, kernels, sizeof(void *) * (size_t)g->n);
    return g;
}
