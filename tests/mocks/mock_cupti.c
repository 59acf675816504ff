/* A mock CUPTI (libcupti.so.13) for CPU-only tests: the subset of the API the deepctx agent uses, with
 * real CUPTI types and record layouts, plus hooks (mockcupti_*) through which the mock CUDA libraries
 * run the agent's callbacks with correlation ids and hand it activity records with known times.
 * One subscriber at a time, like CUPTI. Buffers are delivered on flush or when full, in the calling
 * thread (MOCK_CUPTI_COMPLETED_ONLY=1: as CUPTI documents it, below). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_CBID 1024

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_CallbackFunc subscriber_fn;
static void *subscriber_data;
static int subscribed;
static unsigned char enabled[CUPTI_CB_DOMAIN_SIZE][MAX_CBID];
static unsigned char kinds[64];
static CUpti_BuffersCallbackRequestFunc buffer_requested;
static CUpti_BuffersCallbackCompleteFunc buffer_completed;
static CUpti_TimestampCallbackFunc timestamp_fn;
static uint8_t *buffer;
static size_t buffer_size, buffer_used;
static uint32_t next_correlation = 1;
static uint64_t callbacks;  /* callbacks delivered to the subscriber */

/* --- the CUPTI API subset ------------------------------------------------------------------------ */

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc fn, void *data) {
    pthread_mutex_lock(&lock);
    if (subscribed) {
        pthread_mutex_unlock(&lock);
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    subscribed = 1;
    subscriber_fn = fn;
    subscriber_data = data;
    *sub = (CUpti_SubscriberHandle)&subscribed;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle sub) {
    (void)sub;
    pthread_mutex_lock(&lock);
    subscribed = 0;
    subscriber_fn = NULL;
    memset(enabled, 0, sizeof(enabled));
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

/* CUPTI's dynamic detach: everything the subscriber set up goes (subscription, callbacks, activity kinds,
 * buffer callbacks); CUPTI comes up again on the next call into it. The timestamp callback stays: it is
 * also this mock's device clock (mock_device_run), which a real device keeps through a finalize. */
static int finalized;
EXPORT CUptiResult cuptiFinalize(void) {
    pthread_mutex_lock(&lock);
    subscribed = 0;
    subscriber_fn = NULL;
    memset(enabled, 0, sizeof(enabled));
    memset(kinds, 0, sizeof(kinds));
    buffer_requested = NULL;
    buffer_completed = NULL;
    finalized++;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle sub, CUpti_CallbackDomain domain,
                                       CUpti_CallbackId cbid) {
    (void)sub;
    if ((unsigned)domain >= CUPTI_CB_DOMAIN_SIZE || cbid >= MAX_CBID)
        return CUPTI_ERROR_INVALID_PARAMETER;
    enabled[domain][cbid] = enable ? 1 : 0;
    return CUPTI_SUCCESS;
}

struct cb_name {
    CUpti_CallbackDomain domain;
    uint32_t cbid;
    const char *name;
};
static const struct cb_name NAMES[] = {
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cudaMalloc"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, "cudaMemcpy"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, "cudaMemset"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, "cudaDeviceSynchronize"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch"},
    {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000, "cudaLaunchHostFunc"},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel"},
    {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2"},
};

EXPORT CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char **name) {
    for (size_t i = 0; i < sizeof(NAMES) / sizeof(NAMES[0]); i++) {
        if (NAMES[i].domain == domain && NAMES[i].cbid == cbid) {
            *name = NAMES[i].name;
            return CUPTI_SUCCESS;
        }
    }
    return CUPTI_ERROR_INVALID_PARAMETER;
}

int mockcupti_pcs_enabled(void);  /* mock_cupti_pcs.c */

EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
    if ((unsigned)kind >= sizeof(kinds))
        return CUPTI_ERROR_INVALID_KIND;
    /* As the H100 did (2026-12-06): with PC sampling on in a context, the agent's start ended at the activity
     * kinds (its code was not captured; this one stands in). The agent enables them first. */
    if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && mockcupti_pcs_enabled())
        return CUPTI_ERROR_NOT_COMPATIBLE;
    kinds[kind] = 1;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
    if ((unsigned)kind >= sizeof(kinds))
        return CUPTI_ERROR_INVALID_KIND;
    kinds[kind] = 0;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                                  CUpti_BuffersCallbackCompleteFunc done) {
    if (!req || !done)
        return CUPTI_ERROR_INVALID_PARAMETER;
    buffer_requested = req;
    buffer_completed = done;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn) {
    if (!fn)
        return CUPTI_ERROR_INVALID_PARAMETER;
    timestamp_fn = fn;
    return CUPTI_SUCCESS;
}

static size_t record_size(const CUpti_Activity *r) {
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    default: return 0;
    }
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, CUpti_Activity **rec) {
    size_t pos = *rec ? (size_t)((uint8_t *)*rec - buf) + record_size(*rec) : 0;
    if (pos >= valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *rec = (CUpti_Activity *)(buf + pos);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *dropped) {
    (void)ctx;
    (void)stream;
    *dropped = 0;
    return CUPTI_SUCCESS;
}

static void *reserve(size_t size);

/* Hands the current buffer to the client (lock held; released around the client's callback). */
static void deliver(void) {
    if (!buffer || !buffer_completed)
        return;
    uint8_t *b = buffer;
    size_t size = buffer_size, used = buffer_used;
    buffer = NULL;
    buffer_size = buffer_used = 0;
    pthread_mutex_unlock(&lock);
    buffer_completed(NULL, 0, b, size, used);
    pthread_mutex_lock(&lock);
}

/* Where a record keeps its start and end (NULL for kinds the mock does not write). */
static void record_times(CUpti_Activity *r, uint64_t **start, uint64_t **end) {
    *start = *end = NULL;
    switch (r->kind) {
#define TIMES(kind, type)                       \
    case kind:                                  \
        *start = &((type *)r)->start;           \
        *end = &((type *)r)->end;               \
        break;
    TIMES(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUpti_ActivityKernel10)
    TIMES(CUPTI_ACTIVITY_KIND_MEMCPY, CUpti_ActivityMemcpy6)
    TIMES(CUPTI_ACTIVITY_KIND_MEMSET, CUpti_ActivityMemset4)
    TIMES(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUpti_ActivitySynchronization2)
#undef TIMES
    default:
        break;
    }
}

EXPORT uint64_t mockcupti_now(void);

static int completed_only(void) {
    static int on = -1;
    if (on < 0) {
        const char *s = getenv("MOCK_CUPTI_COMPLETED_ONLY");
        on = s && *s == '1';
    }
    return on;
}

/* MOCK_CUPTI_COMPLETED_ONLY=1, CUPTI's flush as its documentation gives it: a flush that is not forced
 * hands over only buffers every record of which is of finished work (a buffer holding one record of
 * unfinished work is kept whole, full or not); a forced one hands over every buffer, the records of
 * unfinished work without their times. Full buffers wait in `kept` until then. */
#define KEPT_MAX 64
static struct kept_buffer {
    uint8_t *b;
    size_t size, used;
} kept[KEPT_MAX];
static int nkept;

/* How many records in a buffer are of work unfinished by `now`; strip: take their times away as a forced
 * flush hands them over (no end; no start either if not started). */
static size_t unfinished(uint8_t *b, size_t used, uint64_t now, int strip) {
    size_t n = 0;
    for (size_t pos = 0; pos < used;) {
        CUpti_Activity *r = (CUpti_Activity *)(b + pos);
        size_t size = record_size(r);
        if (!size)
            break;
        uint64_t *start, *end;
        record_times(r, &start, &end);
        if (end && *end > now) {
            n++;
            if (strip) {
                *end = 0;
                if (*start > now)
                    *start = 0;
            }
        }
        pos += size;
    }
    return n;
}

/* Hands one kept buffer to the client (lock held; released around the callback). */
static void deliver_kept(struct kept_buffer k) {
    pthread_mutex_unlock(&lock);
    buffer_completed(NULL, 0, k.b, k.size, k.used);
    pthread_mutex_lock(&lock);
}

/* The current buffer is full: CUPTI keeps it until its work has finished (lock held). */
static void keep_full(void) {
    if (nkept == KEPT_MAX) {
        deliver();
        return;
    }
    kept[nkept++] = (struct kept_buffer){buffer, buffer_size, buffer_used};
    buffer = NULL;
    buffer_size = buffer_used = 0;
}

static void flush_completed_only(int forced) {
    uint64_t now = mockcupti_now();
    int left = 0;
    for (int i = 0; i < nkept; i++) {
        struct kept_buffer k = kept[i];
        if (!unfinished(k.b, k.used, now, forced) || forced)
            deliver_kept(k);
        else
            kept[left++] = k;
    }
    nkept = left;
    if (buffer && buffer_used) {
        if (!unfinished(buffer, buffer_used, now, forced) || forced)
            deliver();
    }
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    pthread_mutex_lock(&lock);
    if (!buffer_completed) {
        pthread_mutex_unlock(&lock);
        return CUPTI_ERROR_INVALID_OPERATION;
    }
    if (completed_only())
        flush_completed_only((flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0);
    else if (buffer_used)
        deliver();
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

/* CUPTI's clock now: the agent measures its offset to CLOCK_MONOTONIC with it. */
/* The mock runtime's graph nodes (mock_cudart.c, struct mock_node) begin with their id. */
EXPORT CUptiResult cuptiGetGraphNodeId(CUgraphNode node, uint64_t *id) {
    if (!node || !id)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *id = *(const uint64_t *)node;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
    *timestamp = mockcupti_now();
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **str) {
    *str = r == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "mock CUPTI error";
    return CUPTI_SUCCESS;
}

/* --- hooks for the mock CUDA libraries ----------------------------------------------------------- */

EXPORT uint64_t mockcupti_now(void) {
    if (timestamp_fn)
        return timestamp_fn();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void callback(CUpti_CallbackDomain domain, uint32_t cbid, CUpti_ApiCallbackSite site, uint32_t corr,
                     const char *fn, const char *symbol) {
    pthread_mutex_lock(&lock);
    CUpti_CallbackFunc f = subscribed && cbid < MAX_CBID && enabled[domain][cbid] ? subscriber_fn : NULL;
    void *data = subscriber_data;
    pthread_mutex_unlock(&lock);
    if (!f)
        return;
    __atomic_add_fetch(&callbacks, 1, __ATOMIC_RELAXED);
    CUpti_CallbackData cb;
    memset(&cb, 0, sizeof(cb));
    cb.callbackSite = site;
    cb.functionName = fn;
    cb.symbolName = symbol;
    cb.correlationId = corr;
    f(data, domain, cbid, &cb);
}

/* A resource event (context created, module loaded ...): the subscriber's callback, when it enabled it. */
EXPORT void mockcupti_resource(uint32_t cbid, void *data) {
    pthread_mutex_lock(&lock);
    CUpti_CallbackFunc f = subscribed && cbid < MAX_CBID && enabled[CUPTI_CB_DOMAIN_RESOURCE][cbid] ? subscriber_fn : NULL;
    void *userdata = subscriber_data;
    pthread_mutex_unlock(&lock);
    if (f)
        f(userdata, CUPTI_CB_DOMAIN_RESOURCE, cbid, data);
}

/* An API call starts: a new correlation id, and the subscriber's enter callback in this thread. */
EXPORT uint32_t mockcupti_api_enter(int domain, uint32_t cbid, const char *fn, const char *symbol) {
    uint32_t corr = __atomic_fetch_add(&next_correlation, 1, __ATOMIC_RELAXED);
    callback((CUpti_CallbackDomain)domain, cbid, CUPTI_API_ENTER, corr, fn, symbol);
    return corr;
}

EXPORT void mockcupti_api_exit(int domain, uint32_t cbid, uint32_t corr, const char *fn) {
    callback((CUpti_CallbackDomain)domain, cbid, CUPTI_API_EXIT, corr, fn, NULL);
}

static void *reserve(size_t size) {
    if (buffer && buffer_used + size > buffer_size) {
        if (completed_only())
            keep_full();
        else
            deliver();
    }
    if (!buffer) {
        size_t max_records = 0;
        if (!buffer_requested)
            return NULL;
        buffer_requested(&buffer, &buffer_size, &max_records);
        buffer_used = 0;
        if (!buffer || buffer_size < size)
            return NULL;
    }
    void *p = buffer + buffer_used;
    buffer_used += size;
    memset(p, 0, size);
    return p;
}

/* Keeps the calling thread busy for the nanoseconds the environment variable `name` says (read once into
 * *cache, which starts at -1): the mock libraries' stand-in for CPU work. */
EXPORT void mockcupti_spin_env(const char *name, long long *cache) {
    if (*cache < 0) {
        const char *s = getenv(name);
        *cache = s ? atoll(s) : 0;
    }
    if (*cache <= 0)
        return;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) < *cache);
}

/* MOCK_RECORDING_SPIN_NS: what recording a kernel costs its launch while kernel activity is enabled (the
 * launching thread spins this long), so that a job runs slower while recorded, as a real one does. */
static long long recording_spin_ns = -1;

void mockcupti_pcs_kernel(const char *name);  /* mock_cupti_pcs.c */

EXPORT void mockcupti_kernel(uint32_t corr, const char *name, uint64_t start, uint64_t end, uint32_t stream,
                             uint64_t graph_node, const uint32_t *shape) {
    mockcupti_pcs_kernel(name);
    if (kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL])
        mockcupti_spin_env("MOCK_RECORDING_SPIN_NS", &recording_spin_ns);
    pthread_mutex_lock(&lock);
    if (kinds[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL]) {
        CUpti_ActivityKernel10 *k = reserve(sizeof(*k));
        if (k) {
            k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
            k->start = start;
            k->end = end;
            k->completed = end;
            k->streamId = stream;
            k->correlationId = corr;
            k->name = name;
            k->graphNodeId = graph_node;
            k->graphId = graph_node ? 1 : 0;
            if (shape) {  /* grid, block, dynamic shared memory */
                k->gridX = (int32_t)shape[0];
                k->gridY = (int32_t)shape[1];
                k->gridZ = (int32_t)shape[2];
                k->blockX = (int32_t)shape[3];
                k->blockY = (int32_t)shape[4];
                k->blockZ = (int32_t)shape[5];
                k->dynamicSharedMemory = (int32_t)shape[6];
            }
        }
    }
    pthread_mutex_unlock(&lock);
}

EXPORT void mockcupti_memcpy(uint32_t corr, uint64_t bytes, uint8_t copy_kind, uint64_t start, uint64_t end,
                             uint32_t stream) {
    pthread_mutex_lock(&lock);
    if (kinds[CUPTI_ACTIVITY_KIND_MEMCPY]) {
        CUpti_ActivityMemcpy6 *m = reserve(sizeof(*m));
        if (m) {
            m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
            m->copyKind = copy_kind;
            m->bytes = bytes;
            m->start = start;
            m->end = end;
            m->streamId = stream;
            m->correlationId = corr;
            m->copyCount = 1;
        }
    }
    pthread_mutex_unlock(&lock);
}

EXPORT void mockcupti_memset(uint32_t corr, uint64_t bytes, uint64_t start, uint64_t end, uint32_t stream) {
    pthread_mutex_lock(&lock);
    if (kinds[CUPTI_ACTIVITY_KIND_MEMSET]) {
        CUpti_ActivityMemset4 *m = reserve(sizeof(*m));
        if (m) {
            m->kind = CUPTI_ACTIVITY_KIND_MEMSET;
            m->bytes = bytes;
            m->start = start;
            m->end = end;
            m->streamId = stream;
            m->correlationId = corr;
        }
    }
    pthread_mutex_unlock(&lock);
}

EXPORT void mockcupti_sync(uint32_t corr, uint32_t type, uint64_t start, uint64_t end) {
    pthread_mutex_lock(&lock);
    if (kinds[CUPTI_ACTIVITY_KIND_SYNCHRONIZATION]) {
        CUpti_ActivitySynchronization2 *s = reserve(sizeof(*s));
        if (s) {
            s->kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
            s->type = (CUpti_ActivitySynchronizationType)type;
            s->start = start;
            s->end = end;
            s->correlationId = corr;
        }
    }
    pthread_mutex_unlock(&lock);
}

/* Is a subscriber there, and how many callbacks did it get (tests: an agent nobody watches costs
 * nothing and lets CUPTI go)? */
EXPORT int mockcupti_subscribed(void) { return subscribed; }
EXPORT int mockcupti_finalized(void) { return finalized; }
EXPORT uint64_t mockcupti_callbacks(void) { return __atomic_load_n(&callbacks, __ATOMIC_RELAXED); }
