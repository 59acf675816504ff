/* deepctx rocprofiler-sdk agent: the AMD side of the device-activity agent. Runs inside a HIP target and
 * only reports, through the same USDT probes as the CUPTI agent (agent_common.h, probes/device_activity.h),
 * so deepctxd and its BPF programs join AMD device work to call paths with no AMD-specific logic.
 *
 * Loaded by rocprofiler-sdk when ROCP_TOOL_LIBRARIES names this library (`deepctx run`): the SDK calls
 * rocprofiler_configure() when the process first initializes HIP, then our initialize callback, the only
 * moment the SDK lets a tool create contexts and configure services. There the agent sets up
 *   - a "names" context, always running: code-object callback tracing of kernel-symbol registration, so
 *     that every kernel id has a name (copied once: its address is the stable id dev_record.name carries);
 *   - a "tracing" context, started only while deepctxd watches (the watcher thread of agent_common.c): HIP
 *     runtime API callback tracing of the launch / copy / set / sync calls (correlation probe at ENTER,
 *     api_exit at EXIT, with the SDK's internal correlation id), and buffer tracing of kernel dispatches
 *     and memory copies into one buffer, flushed periodically, on request and at exit (batch, flushed).
 * Nobody watching: the tracing context is stopped, so the SDK runs no callback in the application's calls.
 *
 * Records: this SDK (0.5, rocprofiler_abi.h) has no memset or synchronization records. HIP runs memsets
 * (and some copies) as the runtime's own blit kernels: a dispatch of a "__amd_rocclr_fill*" kernel is
 * reported as a memset, of a "__amd_rocclr_copy*" kernel as a copy (direction unknown), so GPU time lands
 * on the hipMemset / hipMemcpy node as with CUPTI. Synchronization calls announce their correlation id but
 * no record comes. Times: the SDK's clock (rocprofiler_get_timestamp, CLOCK_BOOTTIME in the SDK's source)
 * converted to CLOCK_MONOTONIC by an offset measured at each start. Devices are numbered like HIP's
 * device ids (the GPU agents in the SDK's order), streams by the SDK's queues in order of first sight.
 *
 * Attach: deepctx_agent_attach() registers the tool late with rocprofiler_force_configure(), which the SDK
 * allows only before HIP has initialized (agent_attach() in agent_common.c; deepctx_agent_error says why
 * when it refuses). Settings: as the CUPTI agent (DEEPCTX_BUFFER_KB, DEEPCTX_FLUSH_MS, DEEPCTX_NOTIFY_FD,
 * DEEPCTX_AGENT_WAIT_MS), plus DEEPCTX_ROCPROFILER_LIB (the SDK's path, when it is not the one loaded). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_common.h"
#include "rocprofiler_abi.h"

/* dev_record.copy_kind speaks CUPTI's CUpti_ActivityMemcpyKind (the daemon's COPY_KINDS). */
enum { COPY_UNKNOWN = 0, COPY_HTOD = 1, COPY_DTOH = 2, COPY_DTOD = 8, COPY_HTOH = 9 };

#define MAX_OPS 2048  /* HIP runtime API operations (about 500 in the SDK this was written against) */

struct sdk_api {
    rp_create_context_fn create_context;
    rp_start_context_fn start_context;
    rp_stop_context_fn stop_context;
    rp_create_buffer_fn create_buffer;
    rp_flush_buffer_fn flush_buffer;
    rp_configure_buffer_tracing_service_fn configure_buffer_tracing_service;
    rp_configure_callback_tracing_service_fn configure_callback_tracing_service;
    rp_query_callback_tracing_kind_operation_name_fn query_operation_name;
    rp_iterate_callback_tracing_kind_operations_fn iterate_operations;
    rp_get_timestamp_fn get_timestamp;
    rp_query_available_agents_fn query_available_agents;  /* optional */
    rp_get_status_string_fn get_status_string;            /* optional */
    rp_force_configure_fn force_configure;                /* optional (attach) */
};

static struct sdk_api sdk;
static rp_context_id_t names_context;
static rp_context_id_t tracing_context;
static rp_buffer_id_t buffer;
static int finalized;                  /* the SDK finalized the tool: no more calls into it */
static int64_t clock_offset_ns;        /* SDK clock - CLOCK_MONOTONIC, measured at each start */
static uint64_t sdk_drops_seen;        /* the SDK's drop count as its last buffer callback said */
static const char *op_names[MAX_OPS];  /* HIP operation -> its name (the SDK's constant strings) */
static __thread int in_attach;         /* initialize runs inside deepctx_agent_attach(): lock held */

static const char *sdk_error(rp_status_t s) {
    const char *str = sdk.get_status_string ? sdk.get_status_string(s) : NULL;
    if (str)
        return str;
    static __thread char buf[48];
    snprintf(buf, sizeof(buf), "rocprofiler status %d", s);
    return buf;
}

/* --- small maps: kernel id -> name, queue -> stream number, agent -> device number ------------------- */

struct idmap {
    pthread_mutex_t lock;
    uint64_t *keys;
    uint64_t *vals;
    unsigned char *used;
    size_t cap, n;
};

#define IDMAP_INIT {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL, 0, 0}

static size_t idmap_slot(const struct idmap *m, uint64_t key) {
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (m->cap - 1);
    while (m->used[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

/* Lock held. 0 when out of memory. */
static int idmap_grow(struct idmap *m) {
    size_t cap = m->cap ? m->cap * 2 : 256;
    struct idmap bigger = {PTHREAD_MUTEX_INITIALIZER, calloc(cap, 8), calloc(cap, 8), calloc(cap, 1), cap, 0};
    if (!bigger.keys || !bigger.vals || !bigger.used) {
        free(bigger.keys);
        free(bigger.vals);
        free(bigger.used);
        return 0;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->used[i]) {
            size_t j = idmap_slot(&bigger, m->keys[i]);
            bigger.used[j] = 1;
            bigger.keys[j] = m->keys[i];
            bigger.vals[j] = m->vals[i];
        }
    }
    free(m->keys);
    free(m->vals);
    free(m->used);
    m->keys = bigger.keys;
    m->vals = bigger.vals;
    m->used = bigger.used;
    m->cap = cap;
    return 1;
}

/* The value under key; else `fresh(m)` is stored and returned (fresh NULL: nothing stored, 0). */
static uint64_t idmap_get(struct idmap *m, uint64_t key, uint64_t (*fresh)(struct idmap *), uint64_t fallback) {
    pthread_mutex_lock(&m->lock);
    uint64_t v = fallback;
    if (m->cap) {
        size_t i = idmap_slot(m, key);
        if (m->used[i]) {
            v = m->vals[i];
            pthread_mutex_unlock(&m->lock);
            return v;
        }
    }
    if (fresh && ((m->n + 1) * 2 <= m->cap || idmap_grow(m))) {
        size_t i = idmap_slot(m, key);
        v = fresh(m);
        m->used[i] = 1;
        m->keys[i] = key;
        m->vals[i] = v;
        m->n++;
    }
    pthread_mutex_unlock(&m->lock);
    return v;
}

static void idmap_put(struct idmap *m, uint64_t key, uint64_t val) {
    pthread_mutex_lock(&m->lock);
    if ((m->n + 1) * 2 <= m->cap || idmap_grow(m)) {
        size_t i = idmap_slot(m, key);
        if (!m->used[i])
            m->n++;
        m->used[i] = 1;
        m->keys[i] = key;
        m->vals[i] = val;
    }
    pthread_mutex_unlock(&m->lock);
}

static struct idmap kernel_names = IDMAP_INIT;  /* kernel id -> strdup'd name (never freed: an id) */
static struct idmap queues = IDMAP_INIT;        /* queue handle -> stream number 1, 2, ... */
static struct idmap devices = IDMAP_INIT;       /* agent handle -> device number (GPUs: HIP's order) */

static uint64_t next_number(struct idmap *m) { return m->n + 1; }
static uint64_t next_device(struct idmap *m) { return m->n; }

/* --- finding the SDK ------------------------------------------------------------------------------------ */

static void *open_sdk(void) {
    const char *env = getenv("DEEPCTX_ROCPROFILER_LIB");
    if (env && *env)
        return dlopen(env, RTLD_NOW);
    static const char *const NAMES[] = {"librocprofiler-sdk.so.1", "librocprofiler-sdk.so"};
    for (size_t i = 0; i < sizeof(NAMES) / sizeof(NAMES[0]); i++) {  /* the copy that loaded us */
        void *h = dlopen(NAMES[i], RTLD_NOW | RTLD_NOLOAD);
        if (h)
            return h;
    }
    return NULL;
}

static void *sdk_lib;  /* the SDK's library, once found (it may still lack a function) */

static int load_sdk(void) {
    if (sdk.create_context)
        return DEV_AGENT_OK;
    void *h = sdk_lib = open_sdk();
    if (!h) {
        agent_set_error(DEV_AGENT_E_NO_CUPTI, "rocprofiler-sdk (librocprofiler-sdk.so.1) is not loaded in the "
                        "process%s (set DEEPCTX_ROCPROFILER_LIB)", NULL);
        return DEV_AGENT_E_NO_CUPTI;
    }
    const struct agent_sym syms[] = {
        AGENT_SYM(sdk, start_context, "rocprofiler_start_context", 1),
        AGENT_SYM(sdk, stop_context, "rocprofiler_stop_context", 1),
        AGENT_SYM(sdk, create_buffer, "rocprofiler_create_buffer", 1),
        AGENT_SYM(sdk, flush_buffer, "rocprofiler_flush_buffer", 1),
        AGENT_SYM(sdk, configure_buffer_tracing_service, "rocprofiler_configure_buffer_tracing_service", 1),
        AGENT_SYM(sdk, configure_callback_tracing_service, "rocprofiler_configure_callback_tracing_service", 1),
        AGENT_SYM(sdk, query_operation_name, "rocprofiler_query_callback_tracing_kind_operation_name", 1),
        AGENT_SYM(sdk, iterate_operations, "rocprofiler_iterate_callback_tracing_kind_operations", 1),
        AGENT_SYM(sdk, get_timestamp, "rocprofiler_get_timestamp", 1),
        AGENT_SYM(sdk, query_available_agents, "rocprofiler_query_available_agents", 0),
        AGENT_SYM(sdk, get_status_string, "rocprofiler_get_status_string", 0),
        AGENT_SYM(sdk, force_configure, "rocprofiler_force_configure", 0),
        AGENT_SYM(sdk, create_context, "rocprofiler_create_context", 1),  /* last: set means loaded */
    };
    if (agent_bind(h, syms, sizeof(syms) / sizeof(syms[0]), "rocprofiler-sdk lacks %s") != DEV_AGENT_OK) {
        sdk.create_context = NULL;
        return DEV_AGENT_E_NO_CUPTI;
    }
    return DEV_AGENT_OK;
}

/* --- the calling thread: correlation ids ----------------------------------------------------------------- */

/* HIP calls that cause device work (or wait for it): their callbacks announce correlation ids. */
static const char *const TRACKED[] = {
    "hipLaunch", "hipExtLaunch", "hipModuleLaunch", "hipExtModuleLaunch", "hipHccModuleLaunch", "hipGraphLaunch",
    "hipMemcpy", "hipMemset", "hipDrvMemcpy", "hipDeviceSynchronize", "hipStreamSynchronize",
    "hipEventSynchronize", "hipStreamWaitEvent", "hipCtxSynchronize",
};

static int tracked(const char *name) {
    if (!name || strstr(name, "HostFunc"))
        return 0;
    for (size_t i = 0; i < sizeof(TRACKED) / sizeof(TRACKED[0]); i++) {
        if (strncmp(name, TRACKED[i], strlen(TRACKED[i])) == 0)
            return 1;
    }
    return 0;
}

static void on_hip_api(rp_callback_tracing_record_t rec, rp_user_data_t *user_data, void *data) {
    (void)user_data;
    (void)data;
    uint32_t corr = (uint32_t)rec.correlation_id.internal;  /* the BPF join keys on 32 bits, as for CUPTI */
    if (rec.phase == RP_CALLBACK_PHASE_ENTER) {
        uint32_t api = ((uint32_t)rec.kind << DEV_API_DOMAIN_SHIFT) | ((uint32_t)rec.operation & 0xffff);
        const char *fn = rec.operation >= 0 && rec.operation < MAX_OPS ? op_names[rec.operation] : NULL;
        AGENT_CORRELATION(corr, api, fn, 0);
    } else if (rec.phase == RP_CALLBACK_PHASE_EXIT) {
        AGENT_API_EXIT(corr);
    }
}

struct op_list {
    rp_tracing_operation_t ops[MAX_OPS];
    size_t n;
};

static int collect_op(int32_t kind, rp_tracing_operation_t op, void *data) {
    struct op_list *list = data;
    const char *name = NULL;
    uint64_t len = 0;
    if (op < 0 || op >= MAX_OPS || sdk.query_operation_name(kind, op, &name, &len) != RP_STATUS_SUCCESS)
        return 0;
    if (tracked(name) && list->n < MAX_OPS) {
        op_names[op] = name;
        list->ops[list->n++] = op;
    }
    return 0;  /* 0: go on */
}

/* --- kernel names ---------------------------------------------------------------------------------------- */

static void on_code_object(rp_callback_tracing_record_t rec, rp_user_data_t *user_data, void *data) {
    (void)user_data;
    (void)data;
    if (rec.kind != RP_CALLBACK_TRACING_CODE_OBJECT || rec.operation != RP_CODE_OBJECT_DEVICE_KERNEL_SYMBOL_REGISTER ||
        rec.phase != RP_CALLBACK_PHASE_ENTER || !rec.payload)
        return;
    const rp_kernel_symbol_data_t *sym = rec.payload;
    if (!sym->kernel_name || idmap_get(&kernel_names, sym->kernel_id, NULL, 0))
        return;  /* known (a code object loaded again on another device): keep the first copy */
    char *copy = strdup(sym->kernel_name);
    if (copy)
        idmap_put(&kernel_names, sym->kernel_id, (uint64_t)(uintptr_t)copy);
}

/* --- device records -------------------------------------------------------------------------------------- */

static uint64_t to_monotonic(uint64_t t) { return (uint64_t)((int64_t)t - clock_offset_ns); }

static uint32_t device_of(rp_agent_id_t agent) {
    return (uint32_t)idmap_get(&devices, agent.handle, next_device, UINT32_MAX);
}

static uint8_t copy_kind(int32_t direction) {
    switch (direction) {
    case RP_MEMORY_COPY_HOST_TO_HOST: return COPY_HTOH;
    case RP_MEMORY_COPY_HOST_TO_DEVICE: return COPY_HTOD;
    case RP_MEMORY_COPY_DEVICE_TO_HOST: return COPY_DTOH;
    case RP_MEMORY_COPY_DEVICE_TO_DEVICE: return COPY_DTOD;
    default: return COPY_UNKNOWN;
    }
}

/* One buffer record as a dev_record; 0 for records the agent does not report. */
static int convert(const rp_record_header_t *h, struct dev_record *out) {
    memset(out, 0, sizeof(*out));
    if (h->category != RP_BUFFER_CATEGORY_TRACING || !h->payload)
        return 0;
    uint64_t start, end;
    if (h->kind == RP_BUFFER_TRACING_KERNEL_DISPATCH) {
        const rp_kernel_dispatch_record_t *k = h->payload;
        const char *name = (const char *)(uintptr_t)idmap_get(&kernel_names, k->dispatch_info.kernel_id, NULL, 0);
        out->kind = DEV_KIND_KERNEL;
        if (name && strncmp(name, "__amd_rocclr_fill", 17) == 0) {
            out->kind = DEV_KIND_MEMSET;  /* hipMemset's blit kernel (bytes: not in the record) */
        } else if (name && strncmp(name, "__amd_rocclr_copy", 17) == 0) {
            out->kind = DEV_KIND_MEMCPY;  /* a copy run as a kernel */
            out->copy_kind = COPY_UNKNOWN;
        } else {
            out->name = (uint64_t)(uintptr_t)name;
        }
        start = k->start_timestamp;
        end = k->end_timestamp;
        out->correlation = (uint32_t)k->correlation_id.internal;
        out->stream = (uint32_t)idmap_get(&queues, k->dispatch_info.queue_id.handle, next_number, 0);
        out->device = device_of(k->dispatch_info.agent_id);
    } else if (h->kind == RP_BUFFER_TRACING_MEMORY_COPY) {
        const rp_memory_copy_record_t *m = h->payload;
        out->kind = DEV_KIND_MEMCPY;
        out->copy_kind = copy_kind(m->operation);
        out->bytes = m->bytes;
        start = m->start_timestamp;
        end = m->end_timestamp;
        out->correlation = (uint32_t)m->correlation_id.internal;
        /* the GPU's side of the copy */
        out->device = device_of(m->operation == RP_MEMORY_COPY_DEVICE_TO_HOST ? m->src_agent_id : m->dst_agent_id);
    } else {
        return 0;
    }
    if (!start || end < start) {
        __atomic_add_fetch(&agent_unfinished_records, 1, __ATOMIC_RELAXED);
        return 0;
    }
    out->start_ns = to_monotonic(start);
    out->end_ns = to_monotonic(end);
    return 1;
}

static void on_buffer(rp_context_id_t context, rp_buffer_id_t buffer_id, rp_record_header_t **headers,
                      size_t num_headers, void *data, uint64_t drop_count) {
    (void)context;
    (void)buffer_id;
    (void)data;
    struct dev_record batch[DEV_BATCH];
    uint32_t n = 0;
    if (WATCHED(batch)) {
        for (size_t i = 0; i < num_headers; i++) {
            if (headers[i] && convert(headers[i], &batch[n]) && ++n == DEV_BATCH) {
                agent_fire_batch(batch, n);
                n = 0;
            }
        }
        if (n)
            agent_fire_batch(batch, n);
    }
    uint64_t seen = __atomic_load_n(&sdk_drops_seen, __ATOMIC_RELAXED);  /* the SDK counts since the start */
    if (drop_count > seen && __atomic_compare_exchange_n(&sdk_drops_seen, &seen, drop_count, 0, __ATOMIC_RELAXED,
                                                         __ATOMIC_RELAXED))
        __atomic_add_fetch(&agent_dropped_records, drop_count - seen, __ATOMIC_RELAXED);
}

/* --- starting and stopping (agent_common.c decides when) ------------------------------------------------ */

/* SDK clock - CLOCK_MONOTONIC, the SDK's reading taken between two of ours. */
static int read_sdk_clock(uint64_t *ns) {
    rp_timestamp_t ts = 0;
    if (sdk.get_timestamp(&ts) != RP_STATUS_SUCCESS)
        return -1;
    *ns = ts;
    return 0;
}

static void measure_clock(void) {
    int64_t offset = 0;
    if (agent_clock_offset(read_sdk_clock, &offset) == 0)
        clock_offset_ns = offset;
}

static int start_tracing(void) {
    if (finalized) {
        agent_set_error(DEV_AGENT_E_CUPTI, "rocprofiler-sdk has finalized the agent%s", NULL);
        return DEV_AGENT_E_CUPTI;
    }
    measure_clock();
    rp_status_t s = sdk.start_context(tracing_context);
    if (s != RP_STATUS_SUCCESS) {
        agent_set_error(DEV_AGENT_E_CUPTI, "rocprofiler_start_context failed: %s", sdk_error(s));
        return DEV_AGENT_E_CUPTI;
    }
    return DEV_AGENT_OK;
}

static void stop_tracing(void) {
    if (!finalized)
        sdk.stop_context(tracing_context);
}

static int flush_sdk(int forced) {
    (void)forced;  /* the SDK hands over what it has; records of work still running come later */
    if (finalized)
        return -1;
    return sdk.flush_buffer(buffer) == RP_STATUS_SUCCESS ? 0 : -1;
}

static const struct agent_ops ROCPROF_OPS = {
    .thread_name = "deepctx-rocprof",
    .start = start_tracing,
    .stop = stop_tracing,
    .release = NULL,  /* a stopped context holds nothing: the SDK serves any number of tools */
    .flush = flush_sdk,
};

static rp_status_t number_gpus(int32_t version, const void **agents, size_t num_agents, void *user_data) {
    (void)version;
    (void)user_data;
    uint64_t gpu = 0;
    for (size_t i = 0; i < num_agents; i++) {
        const rp_agent_head_t *a = agents[i];
        if (a && a->type == RP_AGENT_TYPE_GPU)
            idmap_put(&devices, a->id.handle, gpu++);
    }
    for (size_t i = 0; i < num_agents; i++) {  /* CPUs after the GPUs: a copy's host side */
        const rp_agent_head_t *a = agents[i];
        if (a && a->type != RP_AGENT_TYPE_GPU)
            idmap_put(&devices, a->id.handle, UINT32_MAX);
    }
    return RP_STATUS_SUCCESS;
}

#define CHECK(call, what)                                                                    \
    do {                                                                                     \
        rp_status_t s_ = (call);                                                             \
        if (s_ != RP_STATUS_SUCCESS) {                                                       \
            char msg_[160];                                                                  \
            snprintf(msg_, sizeof(msg_), "%s failed: %s", what, sdk_error(s_));              \
            agent_set_error(DEV_AGENT_E_CUPTI, "%s", msg_);                                  \
            return DEV_AGENT_E_CUPTI;                                                        \
        }                                                                                    \
    } while (0)

/* In the tool's initialize callback (the SDK's configuration window), agent_lock held. */
static int agent_init(void) {
    if (agent_initialized)
        return DEV_AGENT_OK;
    agent_read_settings();
    int rc = load_sdk();
    if (rc != DEV_AGENT_OK)
        return rc;
    if (sdk.query_available_agents)
        sdk.query_available_agents(RP_AGENT_INFO_VERSION_0, number_gpus, sizeof(rp_agent_head_t), NULL);

    CHECK(sdk.create_context(&names_context), "rocprofiler_create_context");
    rp_tracing_operation_t symbols = RP_CODE_OBJECT_DEVICE_KERNEL_SYMBOL_REGISTER;
    CHECK(sdk.configure_callback_tracing_service(names_context, RP_CALLBACK_TRACING_CODE_OBJECT, &symbols, 1,
                                                 on_code_object, NULL),
          "code object callback tracing");

    CHECK(sdk.create_context(&tracing_context), "rocprofiler_create_context");
    CHECK(sdk.create_buffer(tracing_context, agent_buffer_bytes, agent_buffer_bytes / 4 * 3,
                            RP_BUFFER_POLICY_LOSSLESS, on_buffer, NULL, &buffer),
          "rocprofiler_create_buffer");
    CHECK(sdk.configure_buffer_tracing_service(tracing_context, RP_BUFFER_TRACING_KERNEL_DISPATCH, NULL, 0, buffer),
          "kernel dispatch buffer tracing");
    CHECK(sdk.configure_buffer_tracing_service(tracing_context, RP_BUFFER_TRACING_MEMORY_COPY, NULL, 0, buffer),
          "memory copy buffer tracing");
    static struct op_list hip_ops;
    hip_ops.n = 0;
    CHECK(sdk.iterate_operations(RP_CALLBACK_TRACING_HIP_RUNTIME_API, collect_op, &hip_ops),
          "listing the HIP runtime API operations");
    if (hip_ops.n == 0) {
        agent_set_error(DEV_AGENT_E_CUPTI, "rocprofiler-sdk lists no HIP launch, copy or sync operation%s", NULL);
        return DEV_AGENT_E_CUPTI;
    }
    CHECK(sdk.configure_callback_tracing_service(tracing_context, RP_CALLBACK_TRACING_HIP_RUNTIME_API, hip_ops.ops,
                                                 hip_ops.n, on_hip_api, NULL),
          "HIP runtime API callback tracing");
    CHECK(sdk.start_context(names_context), "rocprofiler_start_context (kernel names)");
    return agent_start_watching(&ROCPROF_OPS);
}

/* --- the SDK's entry points ------------------------------------------------------------------------------- */

static int tool_initialize(rp_client_finalize_t finalize, void *tool_data) {
    (void)finalize;
    (void)tool_data;
    if (!in_attach)
        pthread_mutex_lock(&agent_lock);
    int rc = agent_init();
    if (!in_attach)
        pthread_mutex_unlock(&agent_lock);
    if (rc != DEV_AGENT_OK) {
        fprintf(stderr, "deepctx agent: no device activity: %s\n", deepctx_agent_error);
        return -1;  /* the SDK drops the tool; the application goes on */
    }
    if (!in_attach) {
        agent_notify_and_wait();
        agent_start_if_watched();
    }
    return 0;
}

/* The SDK finalizes its tools at exit (or when asked): the last records, then no more calls into it. */
static void tool_finalize(void *tool_data) {
    (void)tool_data;
    agent_at_exit();
    pthread_mutex_lock(&agent_lock);
    finalized = 1;
    pthread_mutex_unlock(&agent_lock);
}

static rp_tool_configure_result_t configuration = {sizeof(rp_tool_configure_result_t), tool_initialize,
                                                   tool_finalize, NULL};

/* What rocprofiler-sdk looks up in each library ROCP_TOOL_LIBRARIES names. */
EXPORT rp_tool_configure_result_t *rocprofiler_configure(uint32_t version, const char *runtime_version,
                                                         uint32_t priority, rp_client_id_t *client_id) {
    (void)version;
    (void)runtime_version;
    (void)priority;
    if (client_id)
        client_id->name = "deepctx";
    return &configuration;
}

/* Attach: register late, if the SDK still accepts tools; runs under agent_lock (agent_common.c). */
static int attach_init(void) {
    if (agent_initialized)
        return DEV_AGENT_OK;
    int rc = load_sdk();
    if (rc != DEV_AGENT_OK && sdk_lib)  /* found, and a function missing: load_sdk said which */
        return rc;
    if (rc != DEV_AGENT_OK) {
        agent_set_error(DEV_AGENT_E_NO_CUDA, "the process has not loaded rocprofiler-sdk (librocprofiler-sdk.so.1)"
                        "%s: start it with ROCP_TOOL_LIBRARIES naming the deepctx agent (`deepctx run`)", NULL);
        return DEV_AGENT_E_NO_CUDA;
    }
    if (!sdk.force_configure) {
        agent_set_error(DEV_AGENT_E_CUPTI, "rocprofiler-sdk lacks rocprofiler_force_configure%s", NULL);
        return DEV_AGENT_E_CUPTI;
    }
    in_attach = 1;
    rp_status_t s = sdk.force_configure(rocprofiler_configure);
    in_attach = 0;
    if (s == RP_STATUS_ERROR_CONFIGURATION_LOCKED) {
        agent_set_error(DEV_AGENT_E_CUPTI, "rocprofiler-sdk is already configured in the process and takes no "
                        "late tool%s: start it with `deepctx run` (ROCP_TOOL_LIBRARIES)", NULL);
        return DEV_AGENT_E_CUPTI;
    }
    if (s != RP_STATUS_SUCCESS) {
        agent_set_error(DEV_AGENT_E_CUPTI, "rocprofiler_force_configure failed: %s", sdk_error(s));
        return DEV_AGENT_E_CUPTI;
    }
    if (!agent_initialized) {
        if (deepctx_agent_state < 0)
            return deepctx_agent_state;  /* initialize ran and failed: the error says why */
        agent_set_error(DEV_AGENT_E_CUPTI, "rocprofiler-sdk accepted the agent but did not initialize it%s", NULL);
        return DEV_AGENT_E_CUPTI;
    }
    return DEV_AGENT_OK;
}

/* Attach time (deepctxd, through ptrace): DEV_AGENT_OK, DEV_AGENT_E_* (deepctx_agent_error says why) or
 * DEV_AGENT_E_PENDING, as the CUPTI agent's. */
EXPORT int deepctx_agent_attach(void) { return agent_attach(attach_init); }
