/* A mock HIP runtime (libamdhip64.so.6) for CPU-only tests: the real entry points' names and argument
 * layouts (so deepctx's GPU API probes attach to them as to the real libamdhip64), each running the mock
 * rocprofiler-sdk's callbacks inside the call, as the SDK does through HIP's dispatch table, and queuing
 * records with known durations on a simulated device that runs one thing at a time (start = max(now, when
 * the device is free), end = start + duration):
 *   kernels: the duration registered with mockHipRegisterKernel, which also loads the kernel's symbol
 *            (the SDK's code-object kernel-symbol registration names it);
 *   hipMemcpy: a memory copy record, 1 ns per byte, direction from the hipMemcpyKind;
 *   hipMemset: a dispatch of the runtime's fill kernel (__amd_rocclr_fillBufferAligned), 1 ns per byte,
 *              as HIP runs memsets on AMD GPUs;
 *   hipDeviceSynchronize / hipStreamSynchronize: no record (the SDK has no synchronization records).
 * The first HIP call initializes the runtime, which configures the tools ROCP_TOOL_LIBRARIES names. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mock_rocp.h"
#include "rocprofiler_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_KERNELS 64
#define QUEUE 0x71756575650001ull /* the null stream's queue */

typedef struct {
    unsigned x, y, z;
} dim3;
typedef void *hipStream_t;
typedef int hipError_t;
enum { hipSuccess = 0, hipErrorInvalidDeviceFunction = 98 };

struct kernel {
    const void *handle;
    uint64_t id;
    uint64_t duration_ns;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct kernel kernels[MAX_KERNELS];
static int nkernels;
static uint64_t device_free_at;
static uint64_t fill_kernel_id;
static pthread_once_t runtime_once = PTHREAD_ONCE_INIT;

static uint64_t add_kernel(const void *handle, const char *name, uint64_t duration_ns) {
    pthread_mutex_lock(&lock);
    uint64_t id = 0;
    if (nkernels < MAX_KERNELS) {
        id = (uint64_t)nkernels + 1;
        kernels[nkernels++] = (struct kernel){handle, id, duration_ns};
    }
    pthread_mutex_unlock(&lock);
    if (id)
        mockrocp_register_kernel(id, name);
    return id;
}

/* The runtime comes up: the SDK configures its tools, then the runtime's own code object (blit kernels)
 * loads. */
static void runtime_init(void) {
    mockrocp_init();
    fill_kernel_id = add_kernel(NULL, "__amd_rocclr_fillBufferAligned", 0);
}

static void init(void) { pthread_once(&runtime_once, runtime_init); }

EXPORT hipError_t hipInit(unsigned flags) {
    (void)flags;
    init();
    return hipSuccess;
}

EXPORT void mockHipRegisterKernel(const void *handle, const char *name, uint64_t duration_ns) {
    init();
    add_kernel(handle, name, duration_ns);
}

static const struct kernel *find_kernel(const void *handle) {
    for (int i = 0; i < nkernels; i++)
        if (handle && kernels[i].handle == handle)
            return &kernels[i];
    return NULL;
}

/* Places `duration` of work on the simulated device; returns its start (the SDK's clock). */
static uint64_t device_run(uint64_t duration) {
    uint64_t now = mockrocp_now();
    pthread_mutex_lock(&lock);
    uint64_t start = now > device_free_at ? now : device_free_at;
    device_free_at = start + duration;
    pthread_mutex_unlock(&lock);
    return start;
}

static uint64_t enter(int32_t op) {
    init();
    return mockrocp_api_enter(op);
}

static hipError_t launch(int32_t op, const void *handle) {
    uint64_t corr = enter(op);
    const struct kernel *k = find_kernel(handle);
    hipError_t rc = hipErrorInvalidDeviceFunction;
    if (k) {
        uint64_t start = device_run(k->duration_ns);
        mockrocp_kernel(corr, k->id, start, start + k->duration_ns, QUEUE);
        rc = hipSuccess;
    }
    mockrocp_api_exit(op, corr);
    return rc;
}

EXPORT hipError_t hipLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t smem,
                                  hipStream_t stream) {
    (void)grid; (void)block; (void)args; (void)smem; (void)stream;
    return launch(MOCK_HIP_OP_hipLaunchKernel, func);
}

EXPORT hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned smem, hipStream_t stream, void **params, void **extra) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)smem; (void)stream; (void)params; (void)extra;
    return launch(MOCK_HIP_OP_hipModuleLaunchKernel, f);
}

static int32_t direction(int kind) {
    switch (kind) {
    case 0: return RP_MEMORY_COPY_HOST_TO_HOST;
    case 1: return RP_MEMORY_COPY_HOST_TO_DEVICE;
    case 2: return RP_MEMORY_COPY_DEVICE_TO_HOST;
    case 3: return RP_MEMORY_COPY_DEVICE_TO_DEVICE;
    default: return RP_MEMORY_COPY_HOST_TO_DEVICE;
    }
}

EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t count, int kind) {
    (void)dst;
    (void)src;
    uint64_t corr = enter(MOCK_HIP_OP_hipMemcpy);
    uint64_t start = device_run(count);
    mockrocp_copy(corr, direction(kind), count, start, start + count);
    mockrocp_api_exit(MOCK_HIP_OP_hipMemcpy, corr);
    return hipSuccess;
}

EXPORT hipError_t hipMemset(void *dst, int value, size_t count) {
    (void)dst;
    (void)value;
    uint64_t corr = enter(MOCK_HIP_OP_hipMemset);
    uint64_t start = device_run(count);
    mockrocp_kernel(corr, fill_kernel_id, start, start + count, QUEUE);
    mockrocp_api_exit(MOCK_HIP_OP_hipMemset, corr);
    return hipSuccess;
}

EXPORT hipError_t hipDeviceSynchronize(void) {
    uint64_t corr = enter(MOCK_HIP_OP_hipDeviceSynchronize);
    mockrocp_api_exit(MOCK_HIP_OP_hipDeviceSynchronize, corr);
    return hipSuccess;
}

EXPORT hipError_t hipStreamSynchronize(hipStream_t stream) {
    (void)stream;
    uint64_t corr = enter(MOCK_HIP_OP_hipStreamSynchronize);
    mockrocp_api_exit(MOCK_HIP_OP_hipStreamSynchronize, corr);
    return hipSuccess;
}

EXPORT hipError_t hipMalloc(void **ptr, size_t size) {
    uint64_t corr = enter(MOCK_HIP_OP_hipMalloc);
    *ptr = malloc(size ? size : 1);
    mockrocp_api_exit(MOCK_HIP_OP_hipMalloc, corr);
    return hipSuccess;
}
