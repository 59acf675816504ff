/* A mock CUDA runtime (libcudart.so.13) for CPU-only tests: the real entry points' names and
 * signatures (so deepctx's GPU API probes attach to them), each running the mock CUPTI's callbacks
 * with a correlation id and queuing activity records with known durations on the mock device:
 *   kernels: the duration registered with mockRegisterKernel (a launch goes through the mock driver's
 *            cuLaunchKernel, which announces a correlation id of its own, as a driver may);
 *   cudaMemcpy: 1 ns per byte; cudaMemset: 1 ns per byte; graph launches: each node's kernel under the
 *   launch's one correlation id, node ids 1, 2, ... (mockGraphCreate's graphs) or the ids the mock gave
 *   them; cudaDeviceSynchronize: a sync record that lasts until the device is idle.
 * Stream capture (one at a time, whatever the stream): between cudaStreamBeginCapture and
 * cudaStreamEndCapture a launch runs nothing and makes a graph node (CUPTI's GRAPHNODE_CREATED resource
 * callback, inside the launch's API call); cudaGraphInstantiate clones each node (GRAPHNODE_CLONED), and the
 * executable graph's records carry the clones' ids, as CUDA's do. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>  /* with cuda_runtime_api.h: the real signatures */

#include "mock.h"

#define EXPORT __attribute__((visibility("default")))

#define GRAPH_MAX 16

struct graph {
    int n;
    const void *kernels[GRAPH_MAX];
    uint64_t node_ids[GRAPH_MAX];  /* 0: i + 1 */
};

/* A CUgraphNode of the mock: the mock CUPTI's cuptiGetGraphNodeId reads its id. */
struct mock_node {
    uint64_t id;
};

static uint64_t next_node_id = 1000;
static struct graph *capturing;  /* the graph a stream capture is making */

/* CUPTI's resource callback for a graph node made (original NULL) or cloned from original. */
static void node_event(uint32_t cbid, uint64_t id, uint64_t original) {
    struct mock_node node = {id}, orig = {original};
    CUpti_GraphData gd;
    memset(&gd, 0, sizeof(gd));
    gd.node = (CUgraphNode)&node;
    gd.originalNode = original ? (CUgraphNode)&orig : NULL;
    CUpti_ResourceData rd;
    memset(&rd, 0, sizeof(rd));
    rd.resourceDescriptor = &gd;
    mockcupti_resource(cbid, &rd);
}

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
    int rc = 0;
    if (capturing && capturing->n < GRAPH_MAX) {  /* captured: a node, run at each replay */
        int i = capturing->n++;
        capturing->kernels[i] = func;
        capturing->node_ids[i] = __atomic_fetch_add(&next_node_id, 1, __ATOMIC_RELAXED);
        node_event(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, capturing->node_ids[i], 0);
    } else {
        rc = (int)cuLaunchKernel((CUfunction)func, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                 (unsigned)smem, (CUstream)stream, args, NULL);
    }
    leave(cbid, corr, "cudaLaunchKernel");
    return (cudaError_t)rc;
}

EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    (void)stream;
    (void)mode;
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000;
    uint32_t corr = enter(cbid, "cudaStreamBeginCapture");
    int rc = capturing ? cudaErrorStreamCaptureUnsupported : 0;
    if (!rc)
        capturing = calloc(1, sizeof(*capturing));
    leave(cbid, corr, "cudaStreamBeginCapture");
    return (cudaError_t)rc;
}

EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    (void)stream;
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000;
    uint32_t corr = enter(cbid, "cudaStreamEndCapture");
    *graph = (cudaGraph_t)capturing;
    int rc = capturing ? 0 : cudaErrorIllegalState;
    capturing = NULL;
    leave(cbid, corr, "cudaStreamEndCapture");
    return (cudaError_t)rc;
}

EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    uint32_t cbid = CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000;
    uint32_t corr = enter(cbid, "cudaGraphInstantiate");
    const struct graph *g = (const void *)graph;
    struct graph *x = calloc(1, sizeof(*x));
    x->n = g ? g->n : 0;
    for (int i = 0; i < x->n; i++) {  /* the executable graph's nodes: clones, with ids of their own */
        x->kernels[i] = g->kernels[i];
        x->node_ids[i] = __atomic_fetch_add(&next_node_id, 1, __ATOMIC_RELAXED);
        node_event(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, x->node_ids[i], g->node_ids[i] ? g->node_ids[i] : (uint64_t)i + 1);
    }
    *exec = (cudaGraphExec_t)x;
    leave(cbid, corr, "cudaGraphInstantiate");
    return cudaSuccess;
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
        rc = mock_run_kernel(g->kernels[i], corr, (uint32_t)(uintptr_t)stream, g->node_ids[i] ? g->node_ids[i] : (uint64_t)i + 1);
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
    g->n = n > GRAPH_MAX ? GRAPH_MAX : n;
    memcpy(g->kernels, kernels, sizeof(void *) * (size_t)g->n);
    return g;
}
