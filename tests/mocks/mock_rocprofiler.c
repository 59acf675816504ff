/* A mock rocprofiler-sdk (librocprofiler-sdk.so.1) for CPU-only tests: the subset of the C API the deepctx
 * rocprofiler agent calls, with the layouts of native/rocprofiler_abi.h (which test_rocprof_layout.py checks
 * against the real SDK's headers), plus hooks (mockrocp_*, mock_rocp.h) through which the mock HIP runtime
 * runs the tools' callbacks with correlation ids and hands them records with known times.
 *
 * As the SDK: on the first HIP call each library ROCP_TOOL_LIBRARIES names (':'-separated) is opened, its
 * rocprofiler_configure called, then its initialize; contexts, buffers and services can be set up only
 * during that (else CONFIGURATION_LOCKED), and rocprofiler_force_configure is refused once it is over. API
 * callbacks run in the calling thread for every started context that traces the operation; a record goes
 * to the buffer of every started context that traces its kind; a buffer is handed to its callback when its
 * watermark is reached or on rocprofiler_flush_buffer, which returns after the callback. Kernel symbols
 * registered before a context starts are announced when it starts. Timestamps: CLOCK_BOOTTIME, the SDK's
 * clock, shifted by MOCK_CLOCK_SKEW_NS so that an agent that forgot to convert them is caught. At exit, each
 * tool's finalize runs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mock_rocp.h"
#include "rocprofiler_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_CONTEXTS 16
#define MAX_BUFFERS 16
#define MAX_TOOLS 8
#define MAX_SYMBOLS 256
#define MAX_OPS 512
#define MOCK_CLOCK_SKEW_NS 1000000000000ull /* 1000 s ahead of CLOCK_BOOTTIME */
#define GPU_AGENT 0x6770750000000001ull
#define CPU_AGENT 0x6370750000000001ull

struct service {
    rp_callback_tracing_cb_t callback;
    void *data;
    unsigned char ops[MAX_OPS]; /* callback tracing: which operations */
};

struct context {
    int used, started;
    struct service hip, code_object;
    int has_hip, has_code_object;
    int kernel_buffer, copy_buffer; /* buffer index + 1, 0: not traced */
};

struct item {
    rp_record_header_t header;
    union {
        rp_kernel_dispatch_record_t kernel;
        rp_memory_copy_record_t copy;
    } u;
};

struct buffer {
    int used;
    uint64_t context;
    size_t watermark, capacity;
    rp_buffer_tracing_cb_t callback;
    void *data;
    struct item *items;
    size_t n;
    uint64_t drops;
};

struct tool {
    rp_configure_func_t configure;
    rp_tool_configure_result_t *result;
};

struct symbol {
    uint64_t kernel_id;
    const char *name;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct context contexts[MAX_CONTEXTS];
static struct buffer buffers[MAX_BUFFERS];
static struct tool tools[MAX_TOOLS];
static int ntools;
static struct symbol symbols[MAX_SYMBOLS];
static int nsymbols;
static int configuring; /* a tool's configure / initialize is running */
static int configured;  /* the SDK is configured: no more tools */
static uint64_t next_correlation = 1;
static uint64_t api_callbacks; /* HIP API callbacks delivered to tools */

static const struct {
    int32_t op;
    const char *name;
} HIP_OPS[] = {
    {MOCK_HIP_OP_hipDeviceSynchronize, "hipDeviceSynchronize"},
    {MOCK_HIP_OP_hipFree, "hipFree"},
    {MOCK_HIP_OP_hipLaunchKernel, "hipLaunchKernel"},
    {MOCK_HIP_OP_hipMalloc, "hipMalloc"},
    {MOCK_HIP_OP_hipMemcpy, "hipMemcpy"},
    {MOCK_HIP_OP_hipMemset, "hipMemset"},
    {MOCK_HIP_OP_hipModuleLaunchKernel, "hipModuleLaunchKernel"},
    {MOCK_HIP_OP_hipStreamSynchronize, "hipStreamSynchronize"},
};
#define NHIP_OPS (sizeof(HIP_OPS) / sizeof(HIP_OPS[0]))

static uint64_t thread_id(void) { return (uint64_t)syscall(SYS_gettid); }

static struct context *context_of(rp_context_id_t id) {
    return id.handle >= 1 && id.handle <= MAX_CONTEXTS && contexts[id.handle - 1].used ? &contexts[id.handle - 1]
                                                                                         : NULL;
}

static struct buffer *buffer_of(rp_buffer_id_t id) {
    return id.handle >= 1 && id.handle <= MAX_BUFFERS && buffers[id.handle - 1].used ? &buffers[id.handle - 1]
                                                                                      : NULL;
}

/* --- the rocprofiler-sdk API subset ------------------------------------------------------------------- */

EXPORT rp_status_t rocprofiler_create_context(rp_context_id_t *id) {
    pthread_mutex_lock(&lock);
    rp_status_t s = RP_STATUS_ERROR_CONFIGURATION_LOCKED;
    if (configuring) {
        s = RP_STATUS_ERROR;
        for (int i = 0; i < MAX_CONTEXTS; i++) {
            if (!contexts[i].used) {
                memset(&contexts[i], 0, sizeof(contexts[i]));
                contexts[i].used = 1;
                id->handle = (uint64_t)i + 1;
                s = RP_STATUS_SUCCESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return s;
}

/* Kernel symbols loaded so far, to a context's code-object tracing (lock not held). */
static void announce_symbols(struct context *c) {
    pthread_mutex_lock(&lock);
    int n = nsymbols;
    struct symbol copy[MAX_SYMBOLS];
    memcpy(copy, symbols, sizeof(copy[0]) * (size_t)n);
    struct service svc = c->code_object;
    int on = c->has_code_object && svc.ops[RP_CODE_OBJECT_DEVICE_KERNEL_SYMBOL_REGISTER];
    pthread_mutex_unlock(&lock);
    for (int i = 0; on && i < n; i++) {
        rp_kernel_symbol_data_t data;
        memset(&data, 0, sizeof(data));
        data.size = sizeof(data);
        data.kernel_id = copy[i].kernel_id;
        data.code_object_id = 1;
        char *name = strdup(copy[i].name); /* the SDK's string lives as long as the code object: a copy */
        data.kernel_name = name;
        rp_callback_tracing_record_t rec;
        memset(&rec, 0, sizeof(rec));
        rec.context_id.handle = (uint64_t)(c - contexts) + 1;
        rec.thread_id = thread_id();
        rec.kind = RP_CALLBACK_TRACING_CODE_OBJECT;
        rec.operation = RP_CODE_OBJECT_DEVICE_KERNEL_SYMBOL_REGISTER;
        rec.phase = RP_CALLBACK_PHASE_ENTER;
        rec.payload = &data;
        rp_user_data_t user = {0};
        svc.callback(rec, &user, svc.data);
        memset(name, 'X', strlen(name)); /* gone once the callback returns: the tool must have copied it */
        free(name);
    }
}

EXPORT rp_status_t rocprofiler_start_context(rp_context_id_t id) {
    pthread_mutex_lock(&lock);
    struct context *c = context_of(id);
    int was = c ? c->started : 0;
    if (c)
        c->started = 1;
    pthread_mutex_unlock(&lock);
    if (!c)
        return RP_STATUS_ERROR_CONTEXT_NOT_FOUND;
    if (!was)
        announce_symbols(c);
    return RP_STATUS_SUCCESS;
}

EXPORT rp_status_t rocprofiler_stop_context(rp_context_id_t id) {
    pthread_mutex_lock(&lock);
    struct context *c = context_of(id);
    if (c)
        c->started = 0;
    pthread_mutex_unlock(&lock);
    return c ? RP_STATUS_SUCCESS : RP_STATUS_ERROR_CONTEXT_NOT_FOUND;
}

EXPORT rp_status_t rocprofiler_context_is_active(rp_context_id_t id, int *status) {
    pthread_mutex_lock(&lock);
    struct context *c = context_of(id);
    *status = c ? c->started : 0;
    pthread_mutex_unlock(&lock);
    return c ? RP_STATUS_SUCCESS : RP_STATUS_ERROR_CONTEXT_NOT_FOUND;
}

EXPORT rp_status_t rocprofiler_create_buffer(rp_context_id_t context, size_t size, size_t watermark, int32_t policy,
                                             rp_buffer_tracing_cb_t callback, void *data, rp_buffer_id_t *id) {
    (void)policy;
    pthread_mutex_lock(&lock);
    rp_status_t s = !configuring ? RP_STATUS_ERROR_CONFIGURATION_LOCKED
                    : !context_of(context) ? RP_STATUS_ERROR_CONTEXT_NOT_FOUND
                    : !callback || size < sizeof(struct item) ? RP_STATUS_ERROR_INVALID_ARGUMENT
                    : RP_STATUS_ERROR_BUFFER_NOT_FOUND;
    for (int i = 0; s == RP_STATUS_ERROR_BUFFER_NOT_FOUND && i < MAX_BUFFERS; i++) {
        if (!buffers[i].used) {
            struct buffer *b = &buffers[i];
            memset(b, 0, sizeof(*b));
            b->used = 1;
            b->context = context.handle;
            b->capacity = size / sizeof(struct item);
            b->watermark = watermark / sizeof(struct item);
            if (b->watermark == 0 || b->watermark > b->capacity)
                b->watermark = b->capacity;
            b->callback = callback;
            b->data = data;
            b->items = calloc(b->capacity, sizeof(struct item));
            id->handle = (uint64_t)i + 1;
            s = RP_STATUS_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return s;
}

/* Hands a buffer's records to its callback (lock held; released around the callback). */
static void deliver(struct buffer *b) {
    if (!b->n)
        return;
    size_t n = b->n;
    struct item *items = b->items;
    b->items = calloc(b->capacity, sizeof(struct item)); /* the second half of a lossless buffer */
    b->n = 0;
    rp_record_header_t **headers = calloc(n, sizeof(*headers));
    for (size_t i = 0; i < n; i++) {
        items[i].header.payload = &items[i].u;
        headers[i] = &items[i].header;
    }
    rp_context_id_t ctx = {b->context};
    rp_buffer_id_t id = {(uint64_t)(b - buffers) + 1};
    uint64_t drops = b->drops;
    pthread_mutex_unlock(&lock);
    b->callback(ctx, id, headers, n, b->data, drops);
    pthread_mutex_lock(&lock);
    free(headers);
    free(items);
}

EXPORT rp_status_t rocprofiler_flush_buffer(rp_buffer_id_t id) {
    pthread_mutex_lock(&lock);
    struct buffer *b = buffer_of(id);
    if (b)
        deliver(b);
    pthread_mutex_unlock(&lock);
    return b ? RP_STATUS_SUCCESS : RP_STATUS_ERROR_BUFFER_NOT_FOUND;
}

EXPORT rp_status_t rocprofiler_configure_buffer_tracing_service(rp_context_id_t context, int32_t kind,
                                                                const rp_tracing_operation_t *ops, size_t nops,
                                                                rp_buffer_id_t buffer) {
    (void)ops;
    (void)nops;
    pthread_mutex_lock(&lock);
    struct context *c = context_of(context);
    rp_status_t s = !configuring ? RP_STATUS_ERROR_CONFIGURATION_LOCKED
                    : !c ? RP_STATUS_ERROR_CONTEXT_NOT_FOUND
                    : !buffer_of(buffer) ? RP_STATUS_ERROR_BUFFER_NOT_FOUND
                    : RP_STATUS_SUCCESS;
    if (s == RP_STATUS_SUCCESS) {
        if (kind == RP_BUFFER_TRACING_KERNEL_DISPATCH)
            c->kernel_buffer = (int)buffer.handle;
        else if (kind == RP_BUFFER_TRACING_MEMORY_COPY)
            c->copy_buffer = (int)buffer.handle;
        else
            s = RP_STATUS_ERROR_KIND_NOT_FOUND; /* the mock knows no other kind */
    }
    pthread_mutex_unlock(&lock);
    return s;
}

EXPORT rp_status_t rocprofiler_configure_callback_tracing_service(rp_context_id_t context, int32_t kind,
                                                                  const rp_tracing_operation_t *ops, size_t nops,
                                                                  rp_callback_tracing_cb_t callback, void *data) {
    pthread_mutex_lock(&lock);
    struct context *c = context_of(context);
    rp_status_t s = !configuring ? RP_STATUS_ERROR_CONFIGURATION_LOCKED
                    : !c ? RP_STATUS_ERROR_CONTEXT_NOT_FOUND
                    : !callback ? RP_STATUS_ERROR_INVALID_ARGUMENT
                    : (kind != RP_CALLBACK_TRACING_HIP_RUNTIME_API && kind != RP_CALLBACK_TRACING_CODE_OBJECT)
                        ? RP_STATUS_ERROR_KIND_NOT_FOUND
                        : RP_STATUS_SUCCESS;
    if (s == RP_STATUS_SUCCESS) {
        struct service *svc = kind == RP_CALLBACK_TRACING_HIP_RUNTIME_API ? &c->hip : &c->code_object;
        memset(svc, 0, sizeof(*svc));
        svc->callback = callback;
        svc->data = data;
        for (size_t i = 0; i < (ops ? nops : MAX_OPS); i++) {
            int32_t op = ops ? ops[i] : (int32_t)i;
            if (op >= 0 && op < MAX_OPS)
                svc->ops[op] = 1;
        }
        if (kind == RP_CALLBACK_TRACING_HIP_RUNTIME_API)
            c->has_hip = 1;
        else
            c->has_code_object = 1;
    }
    pthread_mutex_unlock(&lock);
    return s;
}

EXPORT rp_status_t rocprofiler_query_callback_tracing_kind_operation_name(int32_t kind, rp_tracing_operation_t op,
                                                                          const char **name, uint64_t *len) {
    if (kind != RP_CALLBACK_TRACING_HIP_RUNTIME_API)
        return RP_STATUS_ERROR_KIND_NOT_FOUND;
    for (size_t i = 0; i < NHIP_OPS; i++) {
        if (HIP_OPS[i].op == op) {
            if (name)
                *name = HIP_OPS[i].name;
            if (len)
                *len = strlen(HIP_OPS[i].name);
            return RP_STATUS_SUCCESS;
        }
    }
    return RP_STATUS_ERROR_OPERATION_NOT_FOUND;
}

EXPORT rp_status_t rocprofiler_iterate_callback_tracing_kind_operations(int32_t kind,
                                                                        rp_callback_tracing_kind_operation_cb_t cb,
                                                                        void *data) {
    if (kind != RP_CALLBACK_TRACING_HIP_RUNTIME_API)
        return RP_STATUS_ERROR_KIND_NOT_FOUND;
    for (size_t i = 0; i < NHIP_OPS; i++) {
        if (cb(kind, HIP_OPS[i].op, data) != 0)
            break;
    }
    return RP_STATUS_SUCCESS;
}

EXPORT rp_status_t rocprofiler_query_available_agents(int32_t version, rp_query_available_agents_cb_t cb,
                                                      size_t agent_size, void *data) {
    if (version != RP_AGENT_INFO_VERSION_0 || agent_size < sizeof(rp_agent_head_t))
        return RP_STATUS_ERROR_INVALID_ARGUMENT;
    static rp_agent_head_t cpu = {sizeof(rp_agent_head_t), {CPU_AGENT}, RP_AGENT_TYPE_CPU};
    static rp_agent_head_t gpu = {sizeof(rp_agent_head_t), {GPU_AGENT}, RP_AGENT_TYPE_GPU};
    const void *agents[] = {&cpu, &gpu}; /* the SDK lists CPUs first */
    return cb(version, agents, 2, data);
}

EXPORT rp_status_t rocprofiler_get_timestamp(rp_timestamp_t *ts) {
    *ts = mockrocp_now();
    return RP_STATUS_SUCCESS;
}

EXPORT const char *rocprofiler_get_status_string(rp_status_t s) {
    return s == RP_STATUS_SUCCESS ? "success" : "mock rocprofiler error";
}

static void finalize_tools(void) {
    for (int i = 0; i < ntools; i++) {
        if (tools[i].result && tools[i].result->finalize)
            tools[i].result->finalize(tools[i].result->tool_data);
    }
}

static void client_finalize(rp_client_id_t id) { (void)id; }

/* Configures and initializes one tool; 0 when it was already there (lock not held). */
static int add_tool(rp_configure_func_t configure) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < ntools; i++) {
        if (tools[i].configure == configure) {
            pthread_mutex_unlock(&lock);
            return 0;
        }
    }
    if (ntools == MAX_TOOLS) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    int idx = ntools++;
    tools[idx].configure = configure;
    configuring = 1;
    pthread_mutex_unlock(&lock);
    rp_client_id_t client = {NULL, (uint32_t)idx};
    rp_tool_configure_result_t *r = configure(500, "0.5.0 (deepctx mock)", (uint32_t)idx, &client);
    tools[idx].result = r;
    if (r && r->initialize && r->initialize(client_finalize, r->tool_data) != 0)
        tools[idx].result = NULL; /* a failed tool is not finalized */
    pthread_mutex_lock(&lock);
    configuring = 0;
    pthread_mutex_unlock(&lock);
    if (idx == 0)
        atexit(finalize_tools);
    return 1;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_tools(void) {
    const char *env = getenv("ROCP_TOOL_LIBRARIES");
    if (env && *env) {
        char *list = strdup(env), *save = NULL;
        for (char *path = strtok_r(list, ":", &save); path; path = strtok_r(NULL, ":", &save)) {
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            rp_configure_func_t f = h ? (rp_configure_func_t)dlsym(h, "rocprofiler_configure") : NULL;
            if (!f)
                fprintf(stderr, "mock rocprofiler-sdk: cannot load tool %s: %s\n", path, dlerror());
            else
                add_tool(f);
        }
        free(list);
    }
    pthread_mutex_lock(&lock);
    configured = 1;
    pthread_mutex_unlock(&lock);
}

EXPORT rp_status_t rocprofiler_force_configure(rp_configure_func_t configure) {
    pthread_mutex_lock(&lock);
    int locked = configured || configuring;
    pthread_mutex_unlock(&lock);
    if (locked)
        return RP_STATUS_ERROR_CONFIGURATION_LOCKED;
    if (configure)
        add_tool(configure);
    return RP_STATUS_SUCCESS;
}

/* --- hooks for the mock HIP runtime -------------------------------------------------------------------- */

EXPORT void mockrocp_init(void) { pthread_once(&init_once, init_tools); }

EXPORT uint64_t mockrocp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + MOCK_CLOCK_SKEW_NS;
}

EXPORT uint64_t mockrocp_gpu_agent(void) { return GPU_AGENT; }

static void api_callbacks_run(int32_t op, uint64_t corr, int32_t phase) {
    struct service svcs[MAX_CONTEXTS];
    uint64_t ids[MAX_CONTEXTS];
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CONTEXTS; i++) {
        struct context *c = &contexts[i];
        if (c->used && c->started && c->has_hip && op >= 0 && op < MAX_OPS && c->hip.ops[op]) {
            svcs[n] = c->hip;
            ids[n++] = (uint64_t)i + 1;
        }
    }
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++) {
        rp_callback_tracing_record_t rec;
        memset(&rec, 0, sizeof(rec));
        rec.context_id.handle = ids[i];
        rec.thread_id = thread_id();
        rec.correlation_id.internal = corr;
        rec.kind = RP_CALLBACK_TRACING_HIP_RUNTIME_API;
        rec.operation = op;
        rec.phase = phase;
        rp_user_data_t user = {0};
        __atomic_add_fetch(&api_callbacks, 1, __ATOMIC_RELAXED);
        svcs[i].callback(rec, &user, svcs[i].data);
    }
}

EXPORT uint64_t mockrocp_api_enter(int32_t op) {
    uint64_t corr = __atomic_fetch_add(&next_correlation, 1, __ATOMIC_RELAXED);
    api_callbacks_run(op, corr, RP_CALLBACK_PHASE_ENTER);
    return corr;
}

EXPORT void mockrocp_api_exit(int32_t op, uint64_t corr) { api_callbacks_run(op, corr, RP_CALLBACK_PHASE_EXIT); }

EXPORT void mockrocp_register_kernel(uint64_t kernel_id, const char *name) {
    struct context *started[MAX_CONTEXTS];
    int n = 0;
    pthread_mutex_lock(&lock);
    if (nsymbols < MAX_SYMBOLS)
        symbols[nsymbols++] = (struct symbol){kernel_id, strdup(name)};
    for (int i = 0; i < MAX_CONTEXTS; i++)
        if (contexts[i].used && contexts[i].started)
            started[n++] = &contexts[i];
    int last = nsymbols - 1;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++) { /* announce just this one */
        struct context *c = started[i];
        if (!c->has_code_object || !c->code_object.ops[RP_CODE_OBJECT_DEVICE_KERNEL_SYMBOL_REGISTER])
            continue;
        rp_kernel_symbol_data_t data;
        memset(&data, 0, sizeof(data));
        data.size = sizeof(data);
        data.kernel_id = kernel_id;
        data.kernel_name = symbols[last].name;
        rp_callback_tracing_record_t rec;
        memset(&rec, 0, sizeof(rec));
        rec.context_id.handle = (uint64_t)(c - contexts) + 1;
        rec.kind = RP_CALLBACK_TRACING_CODE_OBJECT;
        rec.operation = RP_CODE_OBJECT_DEVICE_KERNEL_SYMBOL_REGISTER;
        rec.phase = RP_CALLBACK_PHASE_ENTER;
        rec.payload = &data;
        rp_user_data_t user = {0};
        c->code_object.callback(rec, &user, c->code_object.data);
    }
}

/* A record to the buffer of every started context tracing `kind` (lock held). */
static struct item *reserve(int kind_buffer_field_is_kernel, struct buffer **out, int *index) {
    for (; *index < MAX_CONTEXTS; (*index)++) {
        struct context *c = &contexts[*index];
        int b = kind_buffer_field_is_kernel ? c->kernel_buffer : c->copy_buffer;
        if (!c->used || !c->started || !b)
            continue;
        struct buffer *buf = &buffers[b - 1];
        (*index)++;
        *out = buf;
        if (buf->n == buf->capacity) {
            buf->drops++;
            return NULL;
        }
        struct item *it = &buf->items[buf->n++];
        memset(it, 0, sizeof(*it));
        return it;
    }
    return NULL;
}

static void after_append(struct buffer *b) {
    if (b->n >= b->watermark)
        deliver(b);
}

EXPORT void mockrocp_kernel(uint64_t corr, uint64_t kernel_id, uint64_t start, uint64_t end, uint64_t queue) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CONTEXTS;) {
        struct buffer *b = NULL;
        struct item *it = reserve(1, &b, &i);
        if (!b)
            break;
        if (!it)
            continue;
        it->header.category = RP_BUFFER_CATEGORY_TRACING;
        it->header.kind = RP_BUFFER_TRACING_KERNEL_DISPATCH;
        rp_kernel_dispatch_record_t *k = &it->u.kernel;
        k->size = sizeof(*k);
        k->kind = RP_BUFFER_TRACING_KERNEL_DISPATCH;
        k->operation = 2; /* ROCPROFILER_KERNEL_DISPATCH_COMPLETE */
        k->correlation_id.internal = corr;
        k->thread_id = thread_id();
        k->start_timestamp = start;
        k->end_timestamp = end;
        k->dispatch_info.size = sizeof(k->dispatch_info);
        k->dispatch_info.agent_id.handle = GPU_AGENT;
        k->dispatch_info.queue_id.handle = queue;
        k->dispatch_info.kernel_id = kernel_id;
        k->dispatch_info.dispatch_id = corr;
        after_append(b);
    }
    pthread_mutex_unlock(&lock);
}

EXPORT void mockrocp_copy(uint64_t corr, int32_t direction, uint64_t bytes, uint64_t start, uint64_t end) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CONTEXTS;) {
        struct buffer *b = NULL;
        struct item *it = reserve(0, &b, &i);
        if (!b)
            break;
        if (!it)
            continue;
        it->header.category = RP_BUFFER_CATEGORY_TRACING;
        it->header.kind = RP_BUFFER_TRACING_MEMORY_COPY;
        rp_memory_copy_record_t *m = &it->u.copy;
        m->size = sizeof(*m);
        m->kind = RP_BUFFER_TRACING_MEMORY_COPY;
        m->operation = direction;
        m->correlation_id.internal = corr;
        m->thread_id = thread_id();
        m->start_timestamp = start;
        m->end_timestamp = end;
        int to_host = direction == RP_MEMORY_COPY_DEVICE_TO_HOST || direction == RP_MEMORY_COPY_HOST_TO_HOST;
        int from_host = direction == RP_MEMORY_COPY_HOST_TO_DEVICE || direction == RP_MEMORY_COPY_HOST_TO_HOST;
        m->dst_agent_id.handle = to_host ? CPU_AGENT : GPU_AGENT;
        m->src_agent_id.handle = from_host ? CPU_AGENT : GPU_AGENT;
        m->bytes = bytes;
        after_append(b);
    }
    pthread_mutex_unlock(&lock);
}

/* Tests: how many started contexts trace HIP calls or device records (an agent nobody watches: none), and
 * how many HIP API callbacks ran. */
EXPORT int mockrocp_tracing_contexts(void) {
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_CONTEXTS; i++) {
        const struct context *c = &contexts[i];
        if (c->used && c->started && (c->has_hip || c->kernel_buffer || c->copy_buffer))
            n++;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

EXPORT uint64_t mockrocp_api_callbacks(void) { return __atomic_load_n(&api_callbacks, __ATOMIC_RELAXED); }
