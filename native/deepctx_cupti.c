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
 * ten times a second), so an idle agent costs one wake-up per 100 ms. The probes, the watcher, the flushes,
 * the `deepctx run` handshake and the attach thread are shared with the rocprofiler-sdk agent
 * (agent_common.c); this file drives CUPTI.
 *
 * CUPTI is opened with dlopen (the copy the process already has, else the one next to the loaded CUDA
 * runtime, else the loader's search path, or $DEEPCTX_CUPTI_LIB), so the agent loads everywhere and
 * says why when it cannot work. Settings: DEEPCTX_BUFFER_KB (CUPTI buffer size, default 4096),
 * DEEPCTX_FLUSH_MS (periodic flush while watched, default 200), DEEPCTX_NOTIFY_FD and
 * DEEPCTX_AGENT_WAIT_MS (the `deepctx run` handshake, see notify_and_wait()). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

#include "agent_common.h"
#include "cupti_tracked.h"
#include "pc_sampling.h"

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
    CUptiResult (*GetTimestamp)(uint64_t *);                       /* optional */
    CUptiResult (*GetGraphNodeId)(CUgraphNode, uint64_t *);        /* optional: graph nodes' call paths */
    CUptiResult (*Finalize)(void);                                 /* optional: CUPTI's dynamic detach */
};

static struct cupti_api cupti;
static int subscribed;
/* CUPTI's dynamic detach. Unsubscribing leaves CUPTI initialized, and an initialized CUPTI keeps costing the
 * process: on the H100 host a launch-bound loop ran 20 to 23% slower in every stretch after the agent had
 * stopped than before its first start (torch.profiler leaves the same, pytorch/pytorch#146604). With
 * DEEPCTX_CUPTI_FINALIZE=1 (the default) the agent releases CUPTI with cuptiFinalize, called where CUPTI documents it safe:
 * in the exit callback of a CUDA call, the next one any thread makes after the release (a process that makes
 * none pays nothing meanwhile). FIN_WANTED -> FIN_RUNNING (that callback) -> FIN_DONE; a start meanwhile
 * takes a wanted one back, or waits for a running one and subscribes afresh. On the H100 host it removed the
 * residue (finalize about 2 ms, the next subscribe about 10 ms). On by default since 2026-12-06, when the GPU
 * test of the device times recorded after a finalize passed on the H100 host; DEEPCTX_CUPTI_FINALIZE=0 only
 * unsubscribes. */
enum { FIN_NONE, FIN_WANTED, FIN_RUNNING, FIN_DONE };
static int finalize_state;
static int finalize_calls;  /* exported count below: tests and bench/ read it */
static int cupti_used;      /* this subscription started activity: only then is there anything to finalize */
static CUpti_SubscriberHandle subscriber;
/* CUPTI's clock - CLOCK_MONOTONIC when CUPTI's timestamp callback is not used (DEEPCTX_TIMESTAMP_CB=0,
 * or a CUPTI without it): measured at each start and flush (cuptiGetTimestamp between two clock_gettime
 * calls). The callback is the default: side by side on the H200 host, a launch-bound loop ran 1.2x
 * faster with it than with CUPTI's own clock (bench/gpu_overhead.py, variants *_offset). */
static volatile int64_t clock_offset_ns;
static int use_timestamp_callback;
static __thread uint32_t runtime_correlation;  /* the runtime call in progress on this thread */
static __thread uint32_t api_correlation;      /* the outermost reported call in progress on this thread */
static __thread uint32_t api_current;          /* ... its domain << 16 | callback id */
static __thread const char *api_current_fn;    /* ... and its name */
/* Bumped at each finalize: a call in progress then never gets its exit callback, so a thread whose calls
 * straddled one forgets the ones above (its correlations are of the CUPTI that went). */
static uint32_t cupti_generation;
static __thread uint32_t thread_generation;

static const CUpti_ActivityKind KINDS[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2,
    CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
};

/* CUPTI's clock: the kernel's CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns(). */
static uint64_t CUPTIAPI cupti_timestamp(void) { return agent_monotonic_ns(); }

static const char *cupti_error(CUptiResult r) {
    const char *s = NULL;
    if (cupti.GetResultString && cupti.GetResultString(r, &s) == CUPTI_SUCCESS && s)
        return s;
    static __thread char buf[32];
    snprintf(buf, sizeof(buf), "CUPTI error %d", (int)r);
    return buf;
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
        agent_set_error(DEV_AGENT_E_NO_CUPTI, "libcupti could not be loaded (set DEEPCTX_CUPTI_LIB): %s", dlerror());
        return DEV_AGENT_E_NO_CUPTI;
    }
    const struct agent_sym syms[] = {
        AGENT_SYM(cupti, Subscribe, "cuptiSubscribe", 1),
        AGENT_SYM(cupti, Unsubscribe, "cuptiUnsubscribe", 1),
        AGENT_SYM(cupti, EnableCallback, "cuptiEnableCallback", 1),
        AGENT_SYM(cupti, GetCallbackName, "cuptiGetCallbackName", 1),
        AGENT_SYM(cupti, ActivityEnable, "cuptiActivityEnable", 1),
        AGENT_SYM(cupti, ActivityDisable, "cuptiActivityDisable", 1),
        AGENT_SYM(cupti, ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks", 1),
        AGENT_SYM(cupti, ActivityRegisterTimestampCallback, "cuptiActivityRegisterTimestampCallback", 0),
        AGENT_SYM(cupti, ActivityFlushAll, "cuptiActivityFlushAll", 1),
        AGENT_SYM(cupti, ActivityGetNextRecord, "cuptiActivityGetNextRecord", 1),
        AGENT_SYM(cupti, ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords", 1),
        AGENT_SYM(cupti, GetResultString, "cuptiGetResultString", 0),
        AGENT_SYM(cupti, GetTimestamp, "cuptiGetTimestamp", 0),
        AGENT_SYM(cupti, GetGraphNodeId, "cuptiGetGraphNodeId", 0),
        AGENT_SYM(cupti, Finalize, "cuptiFinalize", 0),
    };
    pcs_load(h);  /* optional: only `--pc-sampling` needs it, and says so when it is missing */
    return agent_bind(h, syms, sizeof(syms) / sizeof(syms[0]), "libcupti lacks %s");
}

/* --- the calling thread: correlation ids ----------------------------------------------------- */

/* A CUDA graph node made (a launch captured from a stream, a node added) or cloned (an instantiation copies
 * each node into the executable graph, whose ids the kernel records carry): the daemon keeps the call path
 * of the API call that made it for the records of its replays (device_activity.bpf.c, on_dev_graph_node). */
static __thread uint32_t graph_announced;  /* the last call announced for its graph nodes (sampled captures) */

static void on_graph_node(CUpti_CallbackId cbid, const void *data) {
    const CUpti_ResourceData *rd = data;
    const CUpti_GraphData *g = rd ? rd->resourceDescriptor : NULL;
    uint64_t node = 0, original = 0;
    if (!g || !cupti.GetGraphNodeId || cupti.GetGraphNodeId(g->node, &node) != CUPTI_SUCCESS || !node)
        return;
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED &&
        (!g->originalNode || cupti.GetGraphNodeId(g->originalNode, &original) != CUPTI_SUCCESS || !original))
        return;
    uint32_t corr = original ? 0 : api_correlation;
    /* A sampled capture announces a sample of the calls: a call that makes graph nodes is announced as well
     * (once: a graph is made once and replayed often), so that its path is there for the node's replays. It
     * does not become the thread's sample: later calls' records keep theirs. */
    if (corr && corr != graph_announced && WATCHED(graph_node) && WATCHED(correlation) && !agent_announced(corr)) {
        uint32_t api = api_current;  /* in registers: a TLS operand (x@dtpoff(%rax)) is one no decoder reads */
        const char *fn = api_current_fn;
        __asm__ volatile("" : "+r"(api), "+r"(fn));
        STAP_PROBE3(deepctx, correlation, corr, api, fn);
        graph_announced = corr;
    }
    AGENT_GRAPH_NODE(node, original, corr);
}

/* In a CUDA call's exit callback, the release's finalize: CUPTI's subscriber, callbacks, activity and
 * buffers are gone after it (a start subscribes afresh). */
static void finalize_in_callback(void) {
    int wanted = FIN_WANTED;
    if (!__atomic_compare_exchange_n(&finalize_state, &wanted, FIN_RUNNING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;  /* another thread's exit took it, or a start took it back */
    uint64_t t = agent_monotonic_ns();
    CUptiResult r = cupti.Finalize();
    agent_timed(r == CUPTI_SUCCESS ? "release: cuptiFinalize" : "release: cuptiFinalize failed", &t);
    __atomic_add_fetch(&finalize_calls, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&cupti_generation, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&finalize_state, FIN_DONE, __ATOMIC_RELEASE);
}

static void CUPTIAPI on_api(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
    (void)userdata;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) {  /* graph nodes, and what PC sampling enabled (pcs_start) */
        if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED || cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED)
            on_graph_node(cbid, data);
        else
            pcs_on_resource(cbid, data);
        return;
    }
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API)
        return;
    const CUpti_CallbackData *cb = data;
    uint32_t corr = cb->correlationId;
    uint32_t gen = __atomic_load_n(&cupti_generation, __ATOMIC_RELAXED);
    if (__builtin_expect(thread_generation != gen, 0)) {
        thread_generation = gen;
        runtime_correlation = api_correlation = 0;
    }
    /* The runtime's own driver call under the same id was announced with the runtime call. A
     * different id is announced too: the device records may carry either. */
    int inner = domain == CUPTI_CB_DOMAIN_DRIVER_API && runtime_correlation == corr;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
            runtime_correlation = corr;
        if (!inner) {
            uint32_t api = ((uint32_t)domain << DEV_API_DOMAIN_SHIFT) | (uint32_t)cbid;
            if (!api_correlation) {  /* the outermost: a captured launch's graph node is made in it */
                api_correlation = corr;
                api_current = api;
                api_current_fn = cb->functionName;
            }
            const char *fn = cb->functionName;
            int nested = domain == CUPTI_CB_DOMAIN_DRIVER_API && runtime_correlation != 0;
            AGENT_CORRELATION(corr, api, fn, nested);
            if (AGENT_TIMED())  /* after the probe: its own cost is not the call's */
                agent_api_enter(nested);
        }
    } else {
        if (__atomic_load_n(&finalize_state, __ATOMIC_RELAXED) == FIN_WANTED) {
            finalize_in_callback();
            return;  /* CUPTI is gone: nothing of this call is recorded (the agent has stopped) */
        }
        if (!inner) {
            AGENT_API_EXIT(corr);
            if (AGENT_TIMED())
                agent_api_exit(domain == CUPTI_CB_DOMAIN_DRIVER_API && runtime_correlation != 0, corr);
        }
        if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
            runtime_correlation = 0;
        if (api_correlation == corr)
            api_correlation = 0;
    }
}

static void enable_callbacks(CUpti_CallbackDomain domain, uint32_t count) {
    for (uint32_t cbid = 1; cbid < count; cbid++) {
        const char *name = NULL;
        if (cupti.GetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS && cupti_tracked(name))
            cupti.EnableCallback(1, subscriber, domain, cbid);
    }
}

/* --- activity buffers -------------------------------------------------------------------------- */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *p = NULL;
    if (posix_memalign(&p, 8, agent_buffer_bytes) != 0)
        p = NULL;
    *buffer = p;
    *size = p ? agent_buffer_bytes : 0;
    *max_records = 0;
}

static uint64_t to_monotonic(uint64_t t) { return t ? (uint64_t)((int64_t)t - clock_offset_ns) : 0; }

/* The offset between CUPTI's clock and CLOCK_MONOTONIC, now (no-op with the timestamp callback). */
static int read_cupti_clock(uint64_t *ns) { return cupti.GetTimestamp(ns) == CUPTI_SUCCESS ? 0 : -1; }

static void measure_clock_offset(void) {
    if (use_timestamp_callback)
        return;
    int64_t offset = 0;
    if (!cupti.GetTimestamp || agent_clock_offset(read_cupti_clock, &offset) != 0) {
        clock_offset_ns = (int64_t)(agent_realtime_ns() - agent_monotonic_ns());  /* CUPTI's default clock */
        return;
    }
    clock_offset_ns = offset;
}

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
        out->grid[0] = (uint32_t)k->gridX;
        out->grid[1] = (uint32_t)k->gridY;
        out->grid[2] = (uint32_t)k->gridZ;
        out->block[0] = (uint32_t)k->blockX;
        out->block[1] = (uint32_t)k->blockY;
        out->block[2] = (uint32_t)k->blockZ;
        out->shared_mem = (uint32_t)k->dynamicSharedMemory;
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
        __atomic_add_fetch(&agent_unfinished_records, 1, __ATOMIC_RELAXED);
        return 0;
    }
    out->start_ns = to_monotonic(out->start_ns);
    out->end_ns = to_monotonic(out->end_ns);
    if (out->graph_node)
        out->flags |= DEV_REC_F_GRAPH;
    return 1;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)size;
    struct dev_record batch[DEV_BATCH];
    uint32_t n = 0;
    CUpti_Activity *rec = NULL;
    if (valid && WATCHED(batch)) {
        while (cupti.ActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
            if (convert(rec, &batch[n]) && ++n == DEV_BATCH) {
                agent_fire_batch(batch, n);
                n = 0;
            }
        }
        if (n)
            agent_fire_batch(batch, n);
    }
    size_t dropped = 0;
    if (cupti.ActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped)
        __atomic_add_fetch(&agent_dropped_records, dropped, __ATOMIC_RELAXED);
    free(buffer);
}


/* --- starting and stopping (agent_common.c decides when) ------------------------------------------ */

static int flush_cupti(int forced) {
    measure_clock_offset();  /* the records this flush hands over are converted with it */
    pcs_collect(forced);  /* forced: the stop's or the exit's flush, the last one */
    return cupti.ActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0) == CUPTI_SUCCESS ? 0 : -1;
}

/* A start after a release: a finalize still wanted is taken back (the subscription is kept), one running is
 * waited for (it runs in a CUDA call's exit callback: moments), one done leaves nothing subscribed. */
static int settle_finalize(void) {
    int wanted = FIN_WANTED;
    if (__atomic_compare_exchange_n(&finalize_state, &wanted, FIN_NONE, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return DEV_AGENT_OK;
    for (int i = 0; i < 10000 && __atomic_load_n(&finalize_state, __ATOMIC_ACQUIRE) == FIN_RUNNING; i++) {
        struct timespec tick = {0, 1000000L};
        nanosleep(&tick, NULL);
    }
    if (__atomic_load_n(&finalize_state, __ATOMIC_ACQUIRE) == FIN_RUNNING) {
        agent_set_error(DEV_AGENT_E_CUPTI, "cuptiFinalize still running after 10 s%s", NULL);
        return DEV_AGENT_E_CUPTI;  /* no start on a CUPTI going away; the next watcher tries again */
    }
    if (__atomic_load_n(&finalize_state, __ATOMIC_ACQUIRE) == FIN_DONE) {
        subscribed = 0;
        cupti_used = 0;
        __atomic_store_n(&finalize_state, FIN_NONE, __ATOMIC_RELEASE);
        /* the timestamp callback went with CUPTI: registered again for this start's records */
        if (use_timestamp_callback && cupti.ActivityRegisterTimestampCallback(cupti_timestamp) != CUPTI_SUCCESS) {
            use_timestamp_callback = 0;
            measure_clock_offset();
        }
    }
    return DEV_AGENT_OK;
}

static int subscribe(void) {
    int rc = settle_finalize();
    if (rc != DEV_AGENT_OK)
        return rc;
    if (subscribed)
        return DEV_AGENT_OK;
    CUptiResult r = cupti.Subscribe(&subscriber, on_api, NULL);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        agent_set_error(DEV_AGENT_E_BUSY, "CUPTI is held by another profiler (one subscriber at a time)%s", NULL);
        return DEV_AGENT_E_BUSY;
    }
    if (r != CUPTI_SUCCESS) {
        agent_set_error(DEV_AGENT_E_CUPTI, "cuptiSubscribe failed: %s", cupti_error(r));
        return DEV_AGENT_E_CUPTI;
    }
    subscribed = 1;
    return DEV_AGENT_OK;
}

static int start_cupti(void) {
    uint64_t t = agent_monotonic_ns();
    int rc = subscribe();
    if (rc != DEV_AGENT_OK)
        return rc;
    cupti_used = 1;
    agent_timed("start: subscribed", &t);
    measure_clock_offset();
    CUptiResult r = cupti.ActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        agent_set_error(DEV_AGENT_E_CUPTI, "cuptiActivityRegisterCallbacks failed: %s", cupti_error(r));
        return DEV_AGENT_E_CUPTI;
    }
    /* Diagnostics (bench/): DEEPCTX_CALLBACKS=0 leaves the API callbacks off (no correlation: records
     * only), DEEPCTX_SYNC_ACTIVITY=0 the synchronization records; both cost per call. */
    agent_timed("start: buffers registered", &t);
    if (agent_env_u64("DEEPCTX_CALLBACKS", 1)) {
        enable_callbacks(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE);
        enable_callbacks(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE);
    }
    if (cupti.GetGraphNodeId) {  /* graph nodes' call paths: each node made and each clone, once */
        cupti.EnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
        cupti.EnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED);
    }
    agent_timed("start: callbacks on", &t);
    int sync_activity = (int)agent_env_u64("DEEPCTX_SYNC_ACTIVITY", 1);
    for (size_t i = 0; i < sizeof(KINDS) / sizeof(KINDS[0]); i++) {
        if (KINDS[i] == CUPTI_ACTIVITY_KIND_SYNCHRONIZATION && !sync_activity)
            continue;
        r = cupti.ActivityEnable(KINDS[i]);
        if (r != CUPTI_SUCCESS && KINDS[i] == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            agent_set_error(DEV_AGENT_E_CUPTI, "cuptiActivityEnable(CONCURRENT_KERNEL) failed: %s", cupti_error(r));
            return DEV_AGENT_E_CUPTI;
        }
    }
    agent_timed("start: activity on", &t);
    /* PC sampling last: on an attach it is enabled here on the contexts already made, and the start then
     * ended before the activity kinds were on (the H100, 2026-12-06: "callbacks on" and no "activity on");
     * `run` enables it at each context's creation, after the kinds, the order that works on the GPU */
    pcs_start(subscriber, cupti.EnableCallback);
    agent_timed("start: pc sampling", &t);
    return DEV_AGENT_OK;
}

static void stop_cupti(void) {
    for (size_t i = 0; i < sizeof(KINDS) / sizeof(KINDS[0]); i++)
        cupti.ActivityDisable(KINDS[i]);
}

/* Nobody watches (or the last records are handed over): no subscription, so no callback runs and other
 * tools can have CUPTI. */
static void release_cupti(void) {
    if (!subscribed || __atomic_load_n(&finalize_state, __ATOMIC_ACQUIRE) != FIN_NONE)
        return;  /* released already, or its finalize is on its way */
    /* a subscription that never started (the agent loaded at cuInit, nobody watching) enabled nothing: it
     * goes as it came, and no callback ever runs in the application's calls */
    if (cupti_used && cupti.Finalize && agent_env_u64("DEEPCTX_CUPTI_FINALIZE", 1)) {
        /* the next CUDA call's exit finalizes: its callback must be on (DEEPCTX_CALLBACKS=0 left them off) */
        if (!agent_env_u64("DEEPCTX_CALLBACKS", 1)) {
            enable_callbacks(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE);
            enable_callbacks(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE);
        }
        __atomic_store_n(&finalize_state, FIN_WANTED, __ATOMIC_RELEASE);
        return;
    }
    cupti.Unsubscribe(subscriber);
    subscribed = 0;
    cupti_used = 0;
}

/* How many times the agent finalized CUPTI (tests, bench/: the release took effect). */
EXPORT int deepctx_cupti_finalized(void) { return __atomic_load_n(&finalize_calls, __ATOMIC_RELAXED); }

static const struct agent_ops CUPTI_OPS = {
    .thread_name = "deepctx-cupti",
    .start = start_cupti,
    .stop = stop_cupti,
    .release = release_cupti,
    .flush = flush_cupti,
};

/* The common start: CUPTI loaded and subscribed, buffers and clock registered, watcher running. */
static int agent_init(void) {
    if (agent_initialized)
        return DEV_AGENT_OK;
    agent_read_settings();
    int rc = load_cupti();
    if (rc != DEV_AGENT_OK)
        return rc;
    rc = subscribe();  /* now, so that a profiler holding CUPTI is reported at once */
    if (rc != DEV_AGENT_OK)
        return rc;
    /* DEEPCTX_TIMESTAMP_CB=0: CUPTI's own clock and a measured offset instead (see clock_offset_ns) */
    use_timestamp_callback = agent_env_u64("DEEPCTX_TIMESTAMP_CB", 1) && cupti.ActivityRegisterTimestampCallback &&
                             cupti.ActivityRegisterTimestampCallback(cupti_timestamp) == CUPTI_SUCCESS;
    measure_clock_offset();
    return agent_start_watching(&CUPTI_OPS);
}

/* The CUDA driver calls this when CUDA_INJECTION64_PATH names this library (inside cuInit). */
EXPORT int InitializeInjection(void) {
    pthread_mutex_lock(&agent_lock);
    int rc = agent_init();
    pthread_mutex_unlock(&agent_lock);
    if (rc != DEV_AGENT_OK) {
        fprintf(stderr, "deepctx agent: no device activity: %s\n", deepctx_agent_error);
        return 1;  /* never fail the application's cuInit */
    }
    agent_notify_and_wait();
    agent_start_if_watched();
    return 1;  /* CUDA's contract: 1 = success */
}

/* Is there a CUDA context in this process? (attach: nothing to observe before cuInit) */
static int has_cuda_context(void) {
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!cu) {
        agent_set_error(DEV_AGENT_E_NO_CUDA, "the process has not loaded libcuda.so.1%s", NULL);
        return 0;
    }
    int (*get_count)(int *) = (int (*)(int *))dlsym(cu, "cuDeviceGetCount");
    int (*ctx_state)(int, unsigned *, int *) = (int (*)(int, unsigned *, int *))dlsym(cu, "cuDevicePrimaryCtxGetState");
    int n = 0;
    if (!get_count || !ctx_state || get_count(&n) != 0) {
        agent_set_error(DEV_AGENT_E_NO_CUDA, "CUDA is not initialized in the process (no cuInit yet)%s", NULL);
        return 0;
    }
    for (int dev = 0; dev < n; dev++) {
        unsigned flags = 0;
        int on = 0;
        if (ctx_state(dev, &flags, &on) == 0 && on)
            return 1;
    }
    agent_set_error(DEV_AGENT_E_NO_CUDA, "the process has no CUDA context yet%s", NULL);
    return 0;
}

static int attach_init(void) {
    return agent_initialized ? DEV_AGENT_OK : (has_cuda_context() ? agent_init() : DEV_AGENT_E_NO_CUDA);
}

/* Attach time: deepctxd calls this after dlopen, in a thread of the target it borrowed through ptrace
 * (agent_attach() in agent_common.c says how). Returns DEV_AGENT_OK, DEV_AGENT_E_* (deepctx_agent_error
 * says why), or DEV_AGENT_E_PENDING. */
EXPORT int deepctx_agent_attach(void) { return agent_attach(attach_init); }
