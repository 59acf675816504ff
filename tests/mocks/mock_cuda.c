/* A mock CUDA driver (libcuda.so.1) for CPU-only tests. cuInit loads the library CUDA_INJECTION64_PATH
 * names and calls its InitializeInjection, as the real driver does. Kernels are registered with their
 * name and a duration (mockRegisterKernel); a launch runs the CUPTI callbacks of the mock CUPTI with a
 * correlation id and queues an activity record on a simulated device that runs one thing at a time:
 * start = max(now, when the device is free), end = start + duration. With MOCK_GPU_DIR set, the device's
 * state is shared in MOCK_GPU_DIR/<pid> (struct mock_gpu_state, mock.h) for the mock NVML (mock_nvml.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "mock.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_KERNELS 64

struct kernel {
    const void *handle;
    const char *name;
    uint64_t duration_ns;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct kernel kernels[MAX_KERNELS];
static int nkernels;
static int initialized;
static uint64_t device_free_at;

/* The simulated device: MOCK_SM_COUNT multiprocessors (default 132), compute capability 9.0. */
static int mock_context;  /* its address is the one context */

EXPORT CUresult cuCtxGetDevice(CUdevice *dev) {
    *dev = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) {
    (void)ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent(CUcontext *ctx) {
    *ctx = (CUcontext)&mock_context;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev) {
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    const char *sms = getenv("MOCK_SM_COUNT");
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = sms && *sms ? atoi(sms) : 132; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "Mock H200");
    return CUDA_SUCCESS;
}

/* After the injection (first cuInit): the context is created and, with MOCK_CUBIN naming a cubin file,
 * a module of it loaded: CUPTI's resource callbacks, as a real driver makes them. */
static void load_module(void) {
    CUpti_ResourceData ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.context = (CUcontext)&mock_context;
    mockcupti_resource(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, &ctx);
    const char *path = getenv("MOCK_CUBIN");
    FILE *f = path && *path ? fopen(path, "rb") : NULL;
    if (!f)
        return;
    static char cubin[1 << 20];
    size_t n = fread(cubin, 1, sizeof(cubin), f);
    fclose(f);
    mockcupti_pcs_module(cubin, n);  /* the module's CRC, as CUPTI knows it whether or not anyone listened */
    CUpti_ModuleResourceData mod = {1, n, cubin};
    ctx.resourceDescriptor = &mod;
    mockcupti_resource(CUPTI_CBID_RESOURCE_MODULE_LOADED, &ctx);
}

EXPORT CUresult cuInit(unsigned flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    int first = !initialized;
    initialized = 1;
    pthread_mutex_unlock(&lock);
    if (!first)
        return CUDA_SUCCESS;
    const char *inject = getenv("CUDA_INJECTION64_PATH");
    if (inject && *inject) {
        void *h = dlopen(inject, RTLD_NOW);
        int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
        if (!init)
            fprintf(stderr, "mock libcuda: cannot inject %s: %s\n", inject, dlerror());
        else
            init();
    }
    load_module();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = 1;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned *flags, int *active) {
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = 1;
    return CUDA_SUCCESS;
}

/* The primary context is the one context, made at cuInit: an agent loaded later (attach) finds it here. */
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *ctx = (CUcontext)&mock_context;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    return !initialized ? CUDA_ERROR_NOT_INITIALIZED : dev != 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

EXPORT void mockRegisterKernel(const void *handle, const char *name, uint64_t duration_ns) {
    pthread_mutex_lock(&lock);
    if (nkernels < MAX_KERNELS)
        kernels[nkernels++] = (struct kernel){handle, strdup(name), duration_ns};
    pthread_mutex_unlock(&lock);
}

static const struct kernel *find_kernel(const void *handle) {
    for (int i = 0; i < nkernels; i++)
        if (kernels[i].handle == handle)
            return &kernels[i];
    return NULL;
}

/* MOCK_DEVICE_QUEUE_NS: the most work the device queues; a launch beyond it waits for room, as a real
 * runtime blocks when its launch queue is full (0, the default: the queue has no bound). */
static uint64_t queue_bound_ns(void) {
    static long long bound = -1;
    if (bound < 0) {
        const char *s = getenv("MOCK_DEVICE_QUEUE_NS");
        bound = s ? atoll(s) : 0;
    }
    return bound > 0 ? (uint64_t)bound : 0;
}

static struct mock_gpu_state *shared_state(void) {
    static struct mock_gpu_state *state;
    static int tried;
    if (tried)
        return state;
    tried = 1;
    const char *dir = getenv("MOCK_GPU_DIR");
    if (!dir || !*dir)
        return NULL;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, sizeof(*state)) != 0) {
        fprintf(stderr, "mock libcuda: cannot share the device's state in %s\n", path);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    void *p = mmap(NULL, sizeof(*state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    state = p == MAP_FAILED ? NULL : p;
    return state;
}

/* Under the lock: the work committed so far and when the device is free, seqlock-published. */
static void publish(uint64_t committed, uint64_t free_at) {
    struct mock_gpu_state *s = shared_state();
    if (!s)
        return;
    __atomic_add_fetch(&s->seq, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&s->committed_ns, committed, __ATOMIC_RELAXED);
    __atomic_store_n(&s->free_at_ns, free_at, __ATOMIC_RELAXED);
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    __atomic_store_n(&s->clock_offset_ns, (int64_t)mockcupti_now() -
                     (int64_t)((uint64_t)mono.tv_sec * 1000000000ull + (uint64_t)mono.tv_nsec), __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->seq, 1, __ATOMIC_ACQ_REL);
}

static uint64_t committed_ns;  /* all the work ever placed on the device */

/* Places `duration` of work on the simulated device; returns its start. */
EXPORT uint64_t mock_device_run(uint64_t duration) {
    uint64_t bound = queue_bound_ns();
    for (;;) {
        uint64_t now = mockcupti_now();
        pthread_mutex_lock(&lock);
        if (!bound || device_free_at <= now + bound) {
            uint64_t start = now > device_free_at ? now : device_free_at;
            device_free_at = start + duration;
            committed_ns += duration;
            publish(committed_ns, device_free_at);
            pthread_mutex_unlock(&lock);
            return start;
        }
        uint64_t wait = device_free_at - now - bound;
        pthread_mutex_unlock(&lock);
        struct timespec ts = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
        nanosleep(&ts, NULL);  /* the queue drains at the device's pace */
    }
}

EXPORT uint64_t mock_device_idle_at(void) {
    pthread_mutex_lock(&lock);
    uint64_t t = device_free_at;
    pthread_mutex_unlock(&lock);
    return t;
}

/* The launch shape of the cuLaunchKernel in progress on this thread (grid, block, dynamic shared memory):
 * its kernel record carries it, as CUPTI's does. Graph nodes' records carry none. */
static __thread const uint32_t *launch_shape;

/* A kernel on the device under correlation id corr (graph_node: 0 outside graphs). */
EXPORT int mock_run_kernel(const void *handle, uint32_t corr, uint32_t stream, uint64_t graph_node) {
    const struct kernel *k = find_kernel(handle);
    if (!k)
        return 98; /* CUDA_ERROR_INVALID_HANDLE */
    uint64_t start = mock_device_run(k->duration_ns);
    mockcupti_kernel(corr, k->name, start, start + k->duration_ns, stream, graph_node, launch_shape);
    return 0;
}

/* MOCK_LAUNCH_SPIN_NS: each launch keeps the CPU this long between its enter and exit callbacks, a
 * known lower bound for the API time measured around it. */
static long long launch_spin_ns = -1;

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned smem, CUstream stream, void **params, void **extra) {
    (void)params; (void)extra;
    cuInit(0);
    uint32_t corr = mockcupti_api_enter(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                                        "cuLaunchKernel", NULL);
    const uint32_t shape[7] = {gx, gy, gz, bx, by, bz, smem};
    launch_shape = shape;
    mockcupti_spin_env("MOCK_LAUNCH_SPIN_NS", &launch_spin_ns);
    int rc = mock_run_kernel(f, corr, (uint32_t)(uintptr_t)stream, 0);
    launch_shape = NULL;
    mockcupti_api_exit(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, corr, "cuLaunchKernel");
    return (CUresult)rc;
}
