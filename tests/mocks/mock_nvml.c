/* A mock NVML (libnvidia-ml.so.1) for CPU-only tests: one GPU, the simulated devices of the mock CUDA
 * processes that share their state in MOCK_GPU_DIR (mock.h). Like the driver, it samples the GPU's
 * utilization on its own every MOCK_NVML_PERIOD_MS (default 100): the percent of the period in which the
 * devices ran work (summed over the processes, at most 100), stamped on the wall clock in microseconds.
 * Its compute processes are those with a state file that are still alive. MOCK_NVML_MIG=1: in MIG mode.
 * Its name and memory are an H200's. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "mock.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_PROCS 16
#define RING 4096

enum { OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6, INSUFFICIENT_SIZE = 7 };

typedef struct { unsigned long long ts_us, value; } sample_t;  /* nvmlSample_t */
typedef struct {  /* nvmlProcessInfo_t */
    unsigned int pid;
    unsigned long long used;
    unsigned int gpu_instance, compute_instance;
} process_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t sampler;
static int running, inits;
static sample_t ring[RING];
static unsigned long nsamples;
static int device_handle;  /* its address is the one GPU's handle */

static uint64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The pids with a state file in MOCK_GPU_DIR that are alive; their work run by now, summed, in *busy. */
static int processes(unsigned *pids, int max, uint64_t *busy) {
    const char *dir = getenv("MOCK_GPU_DIR");
    DIR *d = dir ? opendir(dir) : NULL;
    int n = 0;
    *busy = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || kill(pid, 0) != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct mock_gpu_state *s = mmap(NULL, sizeof(*s), PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (s == MAP_FAILED)
            continue;
        uint64_t seq, committed, free_at;
        int64_t offset;
        do {
            seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
            committed = __atomic_load_n(&s->committed_ns, __ATOMIC_RELAXED);
            free_at = __atomic_load_n(&s->free_at_ns, __ATOMIC_RELAXED);
            offset = __atomic_load_n(&s->clock_offset_ns, __ATOMIC_RELAXED);
        } while ((seq & 1) || seq != __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE));
        munmap(s, sizeof(*s));
        uint64_t now = (uint64_t)((int64_t)clock_ns(CLOCK_MONOTONIC) + offset);
        *busy += committed - (free_at > now ? free_at - now : 0);
        pids[n++] = (unsigned)pid;
    }
    closedir(d);
    return n;
}

static void *sample_loop(void *arg) {
    (void)arg;
    const char *p = getenv("MOCK_NVML_PERIOD_MS");
    uint64_t period = (uint64_t)(p ? atoi(p) : 100) * 1000000ull;
    unsigned pids[MAX_PROCS];
    uint64_t last_busy = 0, last_at = clock_ns(CLOCK_MONOTONIC);
    /* busy ns by process can only grow while it lives: a process that came or went resets the baseline */
    int last_n = processes(pids, MAX_PROCS, &last_busy);
    uint64_t next = last_at + period;
    for (;;) {
        struct timespec ts = {(time_t)(next / 1000000000ull), (long)(next % 1000000000ull)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        pthread_mutex_lock(&lock);
        int go = running;
        pthread_mutex_unlock(&lock);
        if (!go)
            return NULL;
        uint64_t busy, at = clock_ns(CLOCK_MONOTONIC);
        int n = processes(pids, MAX_PROCS, &busy);
        uint64_t pct = 0;
        if (n == last_n && busy >= last_busy && at > last_at) {
            /* truncated, as the driver does (bench/nvml_rounding.py on the H200: 15.7% reads 15);
             * daemon/busy_meter.busy_share takes a reading's middle */
            pct = (busy - last_busy) * 100 / (at - last_at);
            pct = pct > 100 ? 100 : pct;
        }
        last_busy = busy;
        last_n = n;
        last_at = at;
        pthread_mutex_lock(&lock);
        ring[nsamples++ % RING] = (sample_t){clock_ns(CLOCK_REALTIME) / 1000, pct};
        pthread_mutex_unlock(&lock);
        next += period;
    }
}

EXPORT int nvmlInit_v2(void) {
    pthread_mutex_lock(&lock);
    int start = inits++ == 0;
    if (start)
        running = 1;
    pthread_mutex_unlock(&lock);
    if (start && pthread_create(&sampler, NULL, sample_loop, NULL) != 0)
        return NOT_SUPPORTED;
    return OK;
}

EXPORT int nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    int stop = inits > 0 && --inits == 0;
    if (stop)
        running = 0;
    pthread_mutex_unlock(&lock);
    if (stop)
        pthread_join(sampler, NULL);
    return OK;
}

EXPORT const char *nvmlErrorString(int rc) {
    switch (rc) {
    case OK: return "Success";
    case NOT_SUPPORTED: return "Not Supported";
    case NOT_FOUND: return "Not Found";
    case INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}

EXPORT int nvmlDeviceGetCount_v2(unsigned *n) {
    *n = 1;
    return OK;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) {
    if (i != 0)
        return INVALID_ARGUMENT;
    *h = &device_handle;
    return OK;
}

/* An H200's: 6,144 bits at 3,201 MHz (4.92 TB/s); MOCK_NVML_NO_MEMORY=1: neither is known */
EXPORT int nvmlDeviceGetName(void *h, char *name, unsigned len) {
    (void)h;
    if (len < 10)
        return INSUFFICIENT_SIZE;
    snprintf(name, len, "Mock H200");
    return OK;
}

EXPORT int nvmlDeviceGetMemoryBusWidth(void *h, unsigned *bits) {
    (void)h;
    const char *m = getenv("MOCK_NVML_NO_MEMORY");
    if (m && *m == '1')
        return NOT_SUPPORTED;
    *bits = 6144;
    return OK;
}

EXPORT int nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *mhz) {
    (void)h;
    if (type != 2)  /* NVML_CLOCK_MEM only */
        return NOT_SUPPORTED;
    *mhz = 3201;
    return OK;
}

EXPORT int nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pending) {
    (void)h;
    const char *m = getenv("MOCK_NVML_MIG");
    *cur = *pending = m && *m == '1';
    return OK;
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned *count, process_t *infos) {
    (void)h;
    unsigned pids[MAX_PROCS];
    uint64_t busy;
    int n = processes(pids, MAX_PROCS, &busy);
    if (!infos || *count < (unsigned)n) {
        *count = (unsigned)n;
        return n ? INSUFFICIENT_SIZE : OK;
    }
    for (int i = 0; i < n; i++)
        infos[i] = (process_t){pids[i], 0, 0xFFFFFFFFu, 0xFFFFFFFFu};
    *count = (unsigned)n;
    return OK;
}

/* nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES): the samples newer than `since` (us), oldest first;
 * with no buffer, how many there are. */
EXPORT int nvmlDeviceGetSamples(void *h, int type, unsigned long long since, int *value_type, unsigned *count,
                                sample_t *out) {
    (void)h;
    if (type != 1)
        return NOT_SUPPORTED;
    *value_type = 1;  /* NVML_VALUE_TYPE_UNSIGNED_INT */
    pthread_mutex_lock(&lock);
    unsigned long first = nsamples > RING ? nsamples - RING : 0, n = 0;
    for (unsigned long i = first; i < nsamples; i++)
        if (ring[i % RING].ts_us > since) {
            if (out && n < *count)
                out[n] = ring[i % RING];
            n++;
        }
    pthread_mutex_unlock(&lock);
    if (!n)
        return NOT_FOUND;
    if (out && n > *count)
        n = *count;
    *count = (unsigned)n;
    return OK;
}
