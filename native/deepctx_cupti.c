/* deepctx CUPTI agent: runs inside the target and only reports.
 *
 * Loaded by the CUDA driver through CUDA_INJECTION64_PATH (InitializeInjection, `deepctx run`) or by
 * deepctxd at attach time (dlopen through ptrace, then deepctx_agent_attach()). It enables CUPTI's
 * kernel (concurrent), memcpy, memset and synchronization activity, and fires USDT probes of provider
 * "deepctx" (probes/device_activity.h describes each one):
 *   - correlation, in the thread that makes a launch / copy / set / sync call, with CUPTI's
 *     correlation id: the daemon's BPF program maps the id to that thread's call path;
 *   - batch, per batch of completed activity records (compact struct dev_record);
 *   - flushed, after each flush of CUPTI's buffers (periodic, on request, at exit).
 * Every probe is guarded by its USDT semaphore, which the kernel raises while deepctxd has a probe
 * attached. Nobody watching: CUPTI is not even subscribed (a watcher thread checks the semaphores
 * ten times a second), so an idle agent costs one wake-up per 100 ms.
 *
 * CUPTI is opened with dlopen (the copy the process already has, else the one next to the loaded CUDA
 * runtime, else the loader's search path, or $DEEPCTX_CUPTI_LIB), so the agent loads everywhere and
 * says why when it cannot work. Settings: DEEPCTX_BUFFER_KB (CUPTI buffer size, default 4096),
 * DEEPCTX_FLUSH_MS (periodic flush while watched, default 200), DEEPCTX_NOTIFY_FD and
 * DEEPCTX_AGENT_WAIT_MS (the `deepctx run` handshake, see notify_and_wait()). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#if defined(__x86_64__)
/* A 5-byte nop at each probe site instead of sdt.h's 1-byte one: kernels that optimize uprobes on nop5
 * (6.17+) call a trampoline instead of trapping; others emulate it like any nop (20% faster here). */
#undef _SDT_NOP
#define _SDT_NOP .byte 0x0f;.byte 0x1f;.byte 0x44;.byte 0x00;.byte 0x00
#endif

#include "device_activity.h"

#define EXPORT __attribute__((visibility("default")))

/* USDT semaphores: the kernel adds one per attached probe (uprobe ref_ctr_offset). */
#define SEMAPHORE(name) \
    __extension__ unsigned short deepctx_##name##_semaphore __attribute__((unused, section(".probes")))
SEMAPHORE(correlation);
SEMAPHORE(api_exit);
SEMAPHORE(batch);
SEMAPHORE(flushed);
SEMAPHORE(status);
SEMAPHORE(flush_request);
#define WATCHED(name) __builtin_expect(__atomic_load_n(&deepctx_##name##_semaphore, __ATOMIC_RELAXED) != 0, 0)

/* What the injector and tests can read in the target: DEV_AGENT_* and a sentence. */
EXPORT volatile int deepctx_agent_state = 0;
EXPORT char deepctx_agent_error[256];

struct cupti_api {
    CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
    CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
    CUptiResult (*GetCallbackName)(CUpti_CallbackDomain, uint32_t, const char **);
    CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
    CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
    CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*ActivityRegisterTimestampCallback)(CUpti_TimestampCallbackFunc);  /* optional */
    CUptiResult (*ActivityFlushAll)(uint32_t);
    CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
    CUptiResult (*GetResultString)(CUptiResult, const char **);  /* optional */
};

static struct cupti_api cupti;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  /* state changes and flushes */
static int initialized;
static int subscribed;
static int active;
static int exiting;
static CUpti_SubscriberHandle subscriber;
static size_t buffer_bytes = 4096 * 1024;
static uint64_t flush_period_ns = 200 * 1000000ull;
static uint64_t flush_sequence;
static uint64_t dropped_records;      /* CUPTI's count plus records without timestamps */
static int64_t clock_offset_ns;       /* CUPTI clock - CLOCK_MONOTONIC when no timestamp callback */
static __thread uint32_t runtime_correlation;  /* the runtime call in progress on this thread */

static const CUpti_ActivityKind KINDS[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2,
    CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
};

/* API calls that cause device work (or wait for it): their callbacks announce correlation ids. */
static const char *const TRACKED[] = {
    "cudaLaunch", "cudaMemcpy", "cudaMemset", "cudaGraphLaunch", "cudaDeviceSynchronize",
    "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent",
    "cuLaunch", "cuMemcpy", "cuMemset", "cuGraphLaunch", "cuCtxSynchronize", "cuStreamSynchronize",
    "cuEventSynchronize", "cuStreamWaitEvent",
};

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CUPTI's clock: the kernel's CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns(). */
static uint64_t CUPTIAPI cupti_timestamp(void) { return monotonic_ns(); }

static void set_error(int code, const char *fmt, const char *detail) {
    snprintf(deepctx_agent_error, sizeof(deepctx_agent_error), fmt, detail ? detail : "");
    deepctx_agent_state = code;
}

static const char *cupti_error(CUptiResult r) {
    const char *s = NULL;
    if (cupti.GetResultString && cupti.GetResultString(r, &s) == CUPTI_SUCCESS && s)
        return s;
    static __thread char buf[32];
    snprintf(buf, sizeof(buf), "CUPTI error %d", (int)r);
    return buf;
}

static void report_status(int64_t code) {
    if (WATCHED(status))
        STAP_PROBE1(deepctx, status, code);
}

/* --- finding CUPTI ---------------------------------------------------------------------------- */

static const char *const CUPTI_NAMES[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};

struct runtime_dir {
    char dir[4096];
};

static int find_runtime_dir(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct runtime_dir *out = data;
    const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (!slash || strncmp(slash + 1, "libcudart.so", 12) != 0)
        return 0;
    size_t n = (size_t)(slash - info->dlpi_name);
    if (n >= sizeof(out->dir))
        return 0;
    memcpy(out->dir, info->dlpi_name, n);
    out->dir[n] = 0;
    return 1;
}

static void *open_cupti(void) {
    const char *env = getenv("DEEPCTX_CUPTI_LIB");
    if (env && *env)
        return dlopen(env, RTLD_NOW | RTLD_GLOBAL);
    size_t count = sizeof(CUPTI_NAMES) / sizeof(CUPTI_NAMES[0]);
    for (size_t i = 0; i < count; i++) {  /* the copy the process already uses (PyTorch's, ...) */
        void *h = dlopen(CUPTI_NAMES[i], RTLD_NOW | RTLD_NOLOAD);
        if (h)
            return h;
    }
    struct runtime_dir rd = {{0}};  /* pip wheels put libcupti next to libcudart (nvidia/cu13/lib) */
    if (dl_iterate_phdr(find_runtime_dir, &rd)) {
        for (size_t i = 0; i < count; i++) {
            char path[4200];
            snprintf(path, sizeof(path), "%s/%s", rd.dir, CUPTI_NAMES[i]);
            void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
            if (h)
                return h;
        }
    }
    for (size_t i = 0; i < count; i++) {
        void *h = dlopen(CUPTI_NAMES[i], RTLD_NOW | RTLD_GLOBAL);
        if (h)
            return h;
    }
    return NULL;
}

static int load_cupti(void) {
    void *h = open_cupti();
    if (!h) {
        set_error(DEV_AGENT_E_NO_CUPTI, "libcupti could not be loaded (set DEEPCTX_CUPTI_LIB): %s", dlerror());
        return DEV_AGENT_E_NO_CUPTI;
    }
#define SYM(field, name, required)                                                           \
    do {                                                                                     \
        *(void **)&cupti.field = dlsym(h, name);                                             \
        if (required && !cupti.field) {                                                      \
            set_error(DEV_AGENT_E_NO_CUPTI, "libcupti lacks %s", name);                      \
            return DEV_AGENT_E_NO_CUPTI;                                                     \
        }                                                                                    \
    } while (0)
    SYM(Subscribe, "cuptiSubscribe", 1);
    SYM(Unsubscribe, "cuptiUnsubscribe", 1);
    SYM(EnableCallback, "cuptiEnableCallback", 1);
    SYM(GetCallbackName, "cuptiGetCallbackName", 1);
    SYM(ActivityEnable, "cuptiActivityEnable", 1);
    SYM(ActivityDisable, "cuptiActivityDisable", 1);
    SYM(ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks", 1);
    SYM(ActivityRegisterTimestampCallback, "cuptiActivityRegisterTimestampCallback", 0);
    SYM(ActivityFlushAll, "cuptiActivityFlushAll", 1);
    SYM(ActivityGetNextRecord, "cuptiActivityGetNextRecord", 1);
    SYM(ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords", 1);
    SYM(GetResultString, "cuptiGetResultString", 0);
#undef SYM
    return DEV_AGENT_OK;
}

/* --- the calling thread: correlation ids ----------------------------------------------------- */

static void CUPTIAPI on_api(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
    (void)userdata;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API)
        return;
    const CUpti_CallbackData *cb = data;
    uint32_t corr = cb->correlationId;
    /* The runtime's own driver call under the same id was announced with the runtime call. A
     * different id is announced too: the device records may carry either. */
    int inner = domain == CUPTI_CB_DOMAIN_DRIVER_API && runtime_correlation == corr;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
            runtime_correlation = corr;
        if (!inner && WATCHED(correlation)) {
            uint32_t api = ((uint32_t)domain << DEV_API_DOMAIN_SHIFT) | (uint32_t)cbid;
            const char *fn = cb->functionName;
            STAP_PROBE3(deepctx, correlation, corr, api, fn);
        }
    } else {
        if (!inner && WATCHED(api_exit))
            STAP_PROBE1(deepctx, api_exit, corr);
        if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
            runtime_correlation = 0;
    }
}

static int tracked(const char *name) {
    if (!name || strstr(name, "HostFunc"))
        return 0;
    for (size_t i = 0; i < sizeof(TRACKED) / sizeof(TRACKED[0]); i++) {
        if (strncmp(name, TRACKED[i], strlen(TRACKED[i])) == 0)
            return 1;
    }
    return 0;
}

static void enable_callbacks(CUpti_CallbackDomain domain, uint32_t count) {
    for (uint32_t cbid = 1; cbid < count; cbid++) {
        const char *name = NULL;
        if (cupti.GetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS && tracked(name))
            cupti.EnableCallback(1, subscriber, domain, cbid);
    }
}

/* --- activity buffers -------------------------------------------------------------------------- */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *p = NULL;
    if (posix_memalign(&p, 8, buffer_bytes) != 0)
        p = NULL;
    *buffer = p;
    *size = p ? buffer_bytes : 0;
    *max_records = 0;
}

static uint64_t to_monotonic(uint64_t t) { return t ? (uint64_t)((int64_t)t - clock_offset_ns) : 0; }

/* One CUPTI record as a dev_record; 0 for kinds the agent does not report. */
static int convert(const CUpti_Activity *rec, struct dev_record *out) {
    memset(out, 0, sizeof(*out));
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const void *)rec;
        out->kind = DEV_KIND_KERNEL;
        out->start_ns = k->start;
        out->end_ns = k->end;
        out->name = (uint64_t)(uintptr_t)k->name;
        out->graph_node = k->graphNodeId;
        out->correlation = k->correlationId;
        out->stream = k->streamId;
        out->device = k->deviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const void *)rec;
        out->kind = DEV_KIND_MEMCPY;
        out->copy_kind = m->copyKind;
        out->bytes = m->bytes;
        out->start_ns = m->start;
        out->end_ns = m->end;
        out->graph_node = m->graphNodeId;
        out->correlation = m->correlationId;
        out->stream = m->streamId;
        out->device = m->deviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        const CUpti_ActivityMemcpyPtoP4 *m = (const void *)rec;
        out->kind = DEV_KIND_MEMCPY;
        out->copy_kind = m->copyKind;
        out->bytes = m->bytes;
        out->start_ns = m->start;
        out->end_ns = m->end;
        out->graph_node = m->graphNodeId;
        out->correlation = m->correlationId;
        out->stream = m->streamId;
        out->device = m->deviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const void *)rec;
        out->kind = DEV_KIND_MEMSET;
        out->bytes = m->bytes;
        out->start_ns = m->start;
        out->end_ns = m->end;
        out->graph_node = m->graphNodeId;
        out->correlation = m->correlationId;
        out->stream = m->streamId;
        out->device = m->deviceId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const CUpti_ActivitySynchronization2 *s = (const void *)rec;
        out->kind = DEV_KIND_SYNC;
        out->copy_kind = (uint8_t)s->type;
        out->start_ns = s->start;
        out->end_ns = s->end;
        out->correlation = s->correlationId;
        out->stream = s->streamId;
        out->device = UINT32_MAX;
        break;
    }
    default:
        return 0;
    }
    if (!out->start_ns || out->end_ns < out->start_ns) {  /* no timestamps (forced flush mid-kernel) */
        __atomic_add_fetch(&dropped_records, 1, __ATOMIC_RELAXED);
        return 0;
    }
    out->start_ns = to_monotonic(out->start_ns);
    out->end_ns = to_monotonic(out->end_ns);
    if (out->graph_node)
        out->flags |= DEV_REC_F_GRAPH;
    return 1;
}

static void fire_batch(struct dev_record *records, uint32_t n) {
    STAP_PROBE2(deepctx, batch, records, n);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    struct dev_record batch[DEV_BATCH];
    uint32_t n = 0;
    CUpti_Activity *rec = NULL;
    if (valid && WATCHED(batch)) {
        while (cupti.ActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
            if (convert(rec, &batch[n]) && ++n == DEV_BATCH) {
                fire_batch(batch, n);
                n = 0;
            }
        }
        if (n)
            fire_batch(batch, n);
    }
    size_t dropped = 0;
    if (cupti.ActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        __atomic_add_fetch(&dropped_records, dropped, __ATOMIC_RELAXED);
    free(buffer);
}

/* Delivers CUPTI's buffers (completed records only, or everything when forced), then says so. */
static void flush(uint32_t flags) {
    uint64_t started = monotonic_ns();
    if (cupti.ActivityFlushAll(flags) != CUPTI_SUCCESS)
        return;
    uint64_t seq = ++flush_sequence;
    uint64_t dropped = __atomic_load_n(&dropped_records, __ATOMIC_RELAXED);
    if (WATCHED(flushed))
        STAP_PROBE3(deepctx, flushed, seq, started, dropped);
}

/* --- starting and stopping --------------------------------------------------------------------- */

static int subscribe(void) {
    if (subscribed)
        return DEV_AGENT_OK;
    CUptiResult r = cupti.Subscribe(&subscriber, on_api, NULL);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        set_error(DEV_AGENT_E_BUSY, "CUPTI is held by another profiler (one subscriber at a time)%s", NULL);
        return DEV_AGENT_E_BUSY;
    }
    if (r != CUPTI_SUCCESS) {
        set_error(DEV_AGENT_E_CUPTI, "cuptiSubscribe failed: %s", cupti_error(r));
        return DEV_AGENT_E_CUPTI;
    }
    subscribed = 1;
    return DEV_AGENT_OK;
}

/* Called with the lock held. */
static int start_activity(void) {
    int rc = subscribe();
    if (rc != DEV_AGENT_OK)
        return rc;
    CUptiResult r = cupti.ActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        set_error(DEV_AGENT_E_CUPTI, "cuptiActivityRegisterCallbacks failed: %s", cupti_error(r));
        return DEV_AGENT_E_CUPTI;
    }
    enable_callbacks(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE);
    enable_callbacks(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE);
    for (size_t i = 0; i < sizeof(KINDS) / sizeof(KINDS[0]); i++) {
        r = cupti.ActivityEnable(KINDS[i]);
        if (r != CUPTI_SUCCESS && KINDS[i] == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            set_error(DEV_AGENT_E_CUPTI, "cuptiActivityEnable(CONCURRENT_KERNEL) failed: %s", cupti_error(r));
            return DEV_AGENT_E_CUPTI;
        }
    }
    active = 1;
    deepctx_agent_state = DEV_AGENT_ACTIVE;
    report_status(DEV_AGENT_ACTIVE);
    return DEV_AGENT_OK;
}

/* Called with the lock held: hands everything over, then lets CUPTI go for other tools. */
static void stop_activity(void) {
    for (size_t i = 0; i < sizeof(KINDS) / sizeof(KINDS[0]); i++)
        cupti.ActivityDisable(KINDS[i]);
    flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (subscribed) {
        cupti.Unsubscribe(subscriber);
        subscribed = 0;
    }
    active = 0;
    deepctx_agent_state = DEV_AGENT_IDLE;
    report_status(DEV_AGENT_IDLE);
}

static int watched(void) { return WATCHED(batch) || WATCHED(correlation); }

/* Nobody watches: no subscription, so no callback runs and other tools can have CUPTI. */
static void release_cupti(void) {
    if (subscribed && !active) {
        cupti.Unsubscribe(subscriber);
        subscribed = 0;
    }
}

/* Follows the semaphores: starts when a watcher appears, stops when the last one leaves, flushes
 * periodically and whenever the flush_request semaphore is raised. */
static void *watcher(void *arg) {
    (void)arg;
    uint64_t last_flush = monotonic_ns();
    int failed = 0;  /* start failed for this watcher: do not retry until it leaves */
    for (;;) {
        int w = watched();
        pthread_mutex_lock(&lock);
        if (exiting) {
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        if (w && !active && !failed) {
            int rc = start_activity();
            if (rc != DEV_AGENT_OK) {
                failed = 1;
                report_status(rc);
            }
        } else if (!w && active) {
            stop_activity();
        } else if (!w) {
            release_cupti();
        }
        if (!w)
            failed = 0;
        uint64_t now = monotonic_ns();
        int requested = WATCHED(flush_request);
        if (active && (requested || now - last_flush >= flush_period_ns)) {
            flush(0);
            last_flush = now;
            if (requested)
                STAP_PROBE(deepctx, flush_request);  /* the note the daemon's request attaches to */
        }
        pthread_mutex_unlock(&lock);
        struct timespec tick = {0, (active ? 10 : 100) * 1000000L};
        nanosleep(&tick, NULL);
    }
}

static void at_exit(void) {
    pthread_mutex_lock(&lock);
    exiting = 1;
    if (active) {  /* the last records, before the process is gone */
        flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    pthread_mutex_unlock(&lock);
}

static uint64_t env_u64(const char *name, uint64_t fallback) {
    const char *s = getenv(name);
    if (!s || !*s)
        return fallback;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    return (end && *end == 0) ? (uint64_t)v : fallback;
}

/* The common start: CUPTI loaded and subscribed, buffers and clock registered, watcher running. */
static int agent_init(void) {
    if (initialized)
        return DEV_AGENT_OK;
    buffer_bytes = env_u64("DEEPCTX_BUFFER_KB", 4096) * 1024;
    if (buffer_bytes < 64 * 1024)
        buffer_bytes = 64 * 1024;
    flush_period_ns = env_u64("DEEPCTX_FLUSH_MS", 200) * 1000000ull;
    int rc = load_cupti();
    if (rc != DEV_AGENT_OK)
        return rc;
    rc = subscribe();  /* now, so that a profiler holding CUPTI is reported at once */
    if (rc != DEV_AGENT_OK)
        return rc;
    if (!cupti.ActivityRegisterTimestampCallback ||
        cupti.ActivityRegisterTimestampCallback(cupti_timestamp) != CUPTI_SUCCESS)
        clock_offset_ns = (int64_t)(realtime_ns() - monotonic_ns());  /* CUPTI's default clock */
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &attr, watcher, NULL);
    pthread_attr_destroy(&attr);
    if (err) {
        set_error(DEV_AGENT_E_CUPTI, "cannot start the agent's thread: %s", strerror(err));
        return DEV_AGENT_E_CUPTI;
    }
    pthread_setname_np(t, "deepctx-cupti");
    atexit(at_exit);
    initialized = 1;
    deepctx_agent_state = DEV_AGENT_IDLE;
    if (watched()) {  /* a watcher is already there (`deepctx run`, attach): from the first call */
        rc = start_activity();
        if (rc != DEV_AGENT_OK)
            report_status(rc);
    } else {
        release_cupti();
    }
    return DEV_AGENT_OK;
}

/* `deepctx run`: tell the CLI this process has started CUDA, then wait (bounded) until it says the
 * daemon watches, so that device activity is exact from the first kernel. The CLI's socket is a
 * SOCK_SEQPACKET; each process sends its pid and one end of a private socket pair, and waits for one
 * byte on the other end. */
static void notify_and_wait(void) {
    const char *fd_s = getenv("DEEPCTX_NOTIFY_FD");
    if (!fd_s || !*fd_s)
        return;
    int fd = atoi(fd_s);
    uint64_t wait_ms = env_u64("DEEPCTX_AGENT_WAIT_MS", 60000);
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
        return;
    int32_t pid = (int32_t)getpid();
    struct iovec iov = {&pid, sizeof(pid)};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pair[1], sizeof(int));
    if (sendmsg(fd, &msg, MSG_NOSIGNAL) >= 0) {
        close(pair[1]);
        pair[1] = -1;
        /* Until the CLI answers, or deepctxd's probes are there (the semaphores rise), or time is up. */
        struct pollfd p = {pair[0], POLLIN, 0};
        for (uint64_t waited = 0; waited < wait_ms && !watched(); waited += 10) {
            if (poll(&p, 1, 10) != 0) {
                char reply = 0;
                (void)!read(pair[0], &reply, 1);
                break;
            }
        }
    }
    close(pair[0]);
    if (pair[1] >= 0)
        close(pair[1]);
}

/* The CUDA driver calls this when CUDA_INJECTION64_PATH names this library (inside cuInit). */
EXPORT int InitializeInjection(void) {
    pthread_mutex_lock(&lock);
    int rc = agent_init();
    pthread_mutex_unlock(&lock);
    if (rc != DEV_AGENT_OK) {
        fprintf(stderr, "deepctx agent: no device activity: %s\n", deepctx_agent_error);
        return 1;  /* never fail the application's cuInit */
    }
    notify_and_wait();
    pthread_mutex_lock(&lock);
    if (watched() && !active) {
        int r = start_activity();
        if (r != DEV_AGENT_OK)
            report_status(r);
    }
    pthread_mutex_unlock(&lock);
    return 1;  /* CUDA's contract: 1 = success */
}

/* Is there a CUDA context in this process? (attach: nothing to observe before cuInit) */
static int has_cuda_context(void) {
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!cu) {
        set_error(DEV_AGENT_E_NO_CUDA, "the process has not loaded libcuda.so.1%s", NULL);
        return 0;
    }
    int (*get_count)(int *) = (int (*)(int *))dlsym(cu, "cuDeviceGetCount");
    int (*ctx_state)(int, unsigned *, int *) = (int (*)(int, unsigned *, int *))dlsym(cu, "cuDevicePrimaryCtxGetState");
    int n = 0;
    if (!get_count || !ctx_state || get_count(&n) != 0) {
        set_error(DEV_AGENT_E_NO_CUDA, "CUDA is not initialized in the process (no cuInit yet)%s", NULL);
        return 0;
    }
    for (int dev = 0; dev < n; dev++) {
        unsigned flags = 0;
        int on = 0;
        if (ctx_state(dev, &flags, &on) == 0 && on)
            return 1;
    }
    set_error(DEV_AGENT_E_NO_CUDA, "the process has no CUDA context yet%s", NULL);
    return 0;
}

/* Attach time. deepctxd calls deepctx_agent_attach() after dlopen, in a thread of the target it
 * borrowed through ptrace; that thread may hold locks that CUDA or CUPTI take, so the work runs in a
 * thread of its own and the borrowed one waits for it at most DEEPCTX_ATTACH_WAIT_MS (default 5000).
 * Returns DEV_AGENT_OK, DEV_AGENT_E_* (deepctx_agent_error says why), or DEV_AGENT_E_PENDING when the
 * start outlasted the wait (deepctx_agent_state then tells the outcome when it comes). */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t attach_done = PTHREAD_COND_INITIALIZER;
static int attach_started;
static int attach_finished;
static int attach_result;

static void *attach_worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    int rc = initialized ? DEV_AGENT_OK : (has_cuda_context() ? agent_init() : DEV_AGENT_E_NO_CUDA);
    pthread_mutex_unlock(&lock);
    if (rc != DEV_AGENT_OK)
        deepctx_agent_state = rc;
    pthread_mutex_lock(&attach_lock);
    attach_result = rc;
    attach_finished = 1;
    pthread_cond_broadcast(&attach_done);
    pthread_mutex_unlock(&attach_lock);
    return NULL;
}

EXPORT int deepctx_agent_attach(void) {
    pthread_mutex_lock(&attach_lock);
    if (!attach_started) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &attr, attach_worker, NULL);
        pthread_attr_destroy(&attr);
        if (err) {
            pthread_mutex_unlock(&attach_lock);
            set_error(DEV_AGENT_E_CUPTI, "cannot start the agent's thread: %s", strerror(err));
            return DEV_AGENT_E_CUPTI;
        }
        attach_started = 1;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    uint64_t wait_ms = env_u64("DEEPCTX_ATTACH_WAIT_MS", 5000);
    deadline.tv_sec += (time_t)(wait_ms / 1000);
    deadline.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    while (!attach_finished) {
        if (pthread_cond_timedwait(&attach_done, &attach_lock, &deadline) == ETIMEDOUT)
            break;
    }
    int rc = attach_finished ? attach_result : DEV_AGENT_E_PENDING;
    pthread_mutex_unlock(&attach_lock);
    return rc;
}
