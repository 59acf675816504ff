/* CUPTI's own cost, without deepctx: a bench shim that bench/cupti_floor.py compiles and loads (ctypes)
 * into a workload process, to switch parts of CUPTI on and off between timed blocks of one process.
 *
 *   floor_init()        buffers registered (and CUPTI's timestamp callback unless FLOOR_TSCB=0, as the
 *                       deepctx agent does; with FLOOR_FINALIZE=1 at the first setting that turns something
 *                       on), a flush thread every 200 ms like the agent's
 *   floor_set(flags)    everything off, then the parts in flags on (FLOOR_* below)
 *   floor_counts(out)   callbacks and records seen since the last floor_set
 *
 * With FLOOR_FINALIZE=1, floor_set releases CUPTI (cuptiFinalize) after turning a setting off, as the agent
 * does at a capture's stop with DEEPCTX_CUPTI_FINALIZE=1, and registers its callbacks again before the next
 * setting that turns something on: the "off" blocks then run without what an initialized CUPTI leaves in
 * every CUDA call (on the H100 host the agent's detached stretches ran 17 to 23% slower without it).
 * floor_set is called between blocks, with no CUDA call in flight on another thread of the bench.
 *
 * The callback only keeps the correlation id in a thread-local (what the agent's callback needs before
 * it decides whether to announce the call); completed buffers are walked record by record and freed.
 * So each figure is what CUPTI itself costs, the floor under any way of joining its records. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>

#include "cupti_tracked.h" /* native/: the calls the deepctx agent follows */

enum {
    FLOOR_KERNEL = 1,       /* CONCURRENT_KERNEL records */
    FLOOR_COPY = 2,         /* MEMCPY, MEMCPY2, MEMSET records */
    FLOOR_SYNC = 4,         /* SYNCHRONIZATION records */
    FLOOR_CB_RUNTIME = 8,   /* API callbacks, runtime domain, the agent's tracked calls */
    FLOOR_CB_DRIVER = 16,   /* API callbacks, driver domain, the agent's tracked calls */
    FLOOR_API_RUNTIME = 32, /* API activity records (thread id, correlation, times), runtime, tracked */
    FLOOR_API_DRIVER = 64,  /* API activity records, driver, tracked */
};

static const CUpti_ActivityKind RECORD_KINDS[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2,
    CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
};
static CUpti_SubscriberHandle subscriber;
static int subscribed;
static unsigned current;
static uint64_t callbacks, records;
static __thread uint32_t last_correlation;
static volatile int flusher_on;
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER; /* a flush and a finalize, one at a time */
static int finalize_between, registered;
static uint64_t finalizes;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t CUPTIAPI timestamp(void) { return now_ns(); }

static void CUPTIAPI on_api(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
    (void)userdata, (void)domain, (void)cbid;
    last_correlation = ((const CUpti_CallbackData *)data)->correlationId;
    __atomic_add_fetch(&callbacks, 1, __ATOMIC_RELAXED);
}

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *p = NULL;
    if (posix_memalign(&p, 8, 4u << 20) != 0)
        p = NULL;
    *buffer = p;
    *size = p ? 4u << 20 : 0;
    *max_records = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    uint64_t n = 0;
    while (valid && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
        n++;
    __atomic_add_fetch(&records, n, __ATOMIC_RELAXED);
    free(buffer);
}

static void *flusher(void *arg) {
    (void)arg;
    struct timespec period = {0, 200 * 1000 * 1000};
    for (;;) {
        nanosleep(&period, NULL);
        pthread_mutex_lock(&flush_lock);
        if (flusher_on)
            cuptiActivityFlushAll(0);
        pthread_mutex_unlock(&flush_lock);
    }
    return NULL;
}

/* Each tracked call of a domain: its callback (cb) or its API activity records (api) on or off. */
static void each_tracked(CUpti_CallbackDomain domain, uint32_t count, int cb, int api, uint8_t on) {
    if (!cb && !api)
        return; /* no CUPTI call at all: after a finalize, an "off" block leaves CUPTI released */
    for (uint32_t cbid = 1; cbid < count; cbid++) {
        const char *name = NULL;
        if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !cupti_tracked(name))
            continue;
        if (cb)
            cuptiEnableCallback(on, subscriber, domain, cbid);
        if (api && domain == CUPTI_CB_DOMAIN_RUNTIME_API)
            cuptiActivityEnableRuntimeApi(cbid, on);
        if (api && domain == CUPTI_CB_DOMAIN_DRIVER_API)
            cuptiActivityEnableDriverApi(cbid, on);
    }
}

static int register_callbacks(void) {
    const char *tscb = getenv("FLOOR_TSCB");
    if (!(tscb && strcmp(tscb, "0") == 0) && cuptiActivityRegisterTimestampCallback(timestamp) != CUPTI_SUCCESS)
        return -1;
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS)
        return -2;
    registered = 1;
    return 0;
}

__attribute__((visibility("default"))) int floor_init(void) {
    const char *fin = getenv("FLOOR_FINALIZE");
    finalize_between = fin && strcmp(fin, "1") == 0;
    int rc = finalize_between ? 0 : register_callbacks(); /* finalizing: CUPTI untouched until a setting is on */
    if (rc)
        return rc;
    pthread_t t;
    return pthread_create(&t, NULL, flusher, NULL) == 0 ? 0 : -3;
}

__attribute__((visibility("default"))) int floor_set(unsigned flags) {
    /* off: what the previous setting turned on (nothing to do, and no CUPTI call, after an "off") */
    flusher_on = 0;
    if (current) {
        for (size_t i = 0; i < sizeof(RECORD_KINDS) / sizeof(RECORD_KINDS[0]); i++)
            cuptiActivityDisable(RECORD_KINDS[i]);
        if (subscribed || current & (FLOOR_API_RUNTIME | FLOOR_API_DRIVER)) {
            each_tracked(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, subscribed, 1, 0);
            each_tracked(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, subscribed, 1, 0);
        }
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    if (subscribed) {
        cuptiUnsubscribe(subscriber);
        subscribed = 0;
    }
    if (finalize_between && registered && current) {
        pthread_mutex_lock(&flush_lock);
        CUptiResult r = cuptiFinalize();
        pthread_mutex_unlock(&flush_lock);
        if (r != CUPTI_SUCCESS)
            return -4;
        registered = 0;
        finalizes++;
    }
    current = flags;
    if (flags && !registered && register_callbacks() != 0)
        return -5;
    __atomic_store_n(&callbacks, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&records, 0, __ATOMIC_RELAXED);
    /* on */
    if (flags & (FLOOR_CB_RUNTIME | FLOOR_CB_DRIVER)) {
        if (cuptiSubscribe(&subscriber, on_api, NULL) != CUPTI_SUCCESS)
            return -1;
        subscribed = 1;
    }
    each_tracked(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, !!(flags & FLOOR_CB_RUNTIME),
                 !!(flags & FLOOR_API_RUNTIME), 1);
    each_tracked(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, !!(flags & FLOOR_CB_DRIVER),
                 !!(flags & FLOOR_API_DRIVER), 1);
    if (flags & FLOOR_KERNEL && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
        return -2;
    if (flags & FLOOR_COPY) {
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2);
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    }
    if (flags & FLOOR_SYNC)
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    flusher_on = (flags & ~(unsigned)(FLOOR_CB_RUNTIME | FLOOR_CB_DRIVER)) != 0;
    return 0;
}

/* out[0] callbacks, out[1] records since the last floor_set (records after a flush), out[2] finalizes so far. */
__attribute__((visibility("default"))) void floor_counts(uint64_t *out) {
    if (registered)
        cuptiActivityFlushAll(0);
    out[2] = finalizes;
    out[0] = __atomic_load_n(&callbacks, __ATOMIC_RELAXED);
    out[1] = __atomic_load_n(&records, __ATOMIC_RELAXED);
}
