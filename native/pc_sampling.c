/* PC sampling in the CUPTI agent (pc_sampling.h). Everything it learns goes out through one USDT probe,
 * pcs(kind, data, len) (probes/pc_samples.h): sample records, the names they refer to (functions, stall
 * reasons), the cubins they are in (so deepctxd can disassemble them after the process is gone), the
 * device, and statuses that say why sampling did not run. */
#define _GNU_SOURCE
#include "pc_sampling.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti_pcsampling.h>

#include "agent_common.h"
#include "cubin_scan.h"
#include "pc_samples.h"

/* The pcs probe's semaphore: raised while deepctxd reads the probe, its request to sample. */
__extension__ unsigned short deepctx_pcs_semaphore __attribute__((unused, section(".probes")));
/* deepctxd's options (`deepctx attach --pc-sampling`: the environment cannot carry them), written into the
 * process before the semaphore rises; read at each start (pc_samples.h, struct pcs_config). */
EXPORT struct pcs_config deepctx_pcs_config;

#define MAX_CONTEXTS 16
#define MAX_CUBINS 1024
#define MAX_RESIDENT 16384  /* cubins found in the process's memory (modules loaded before the agent) */
#define NAME_SLOTS 4096     /* function names interned (open addressing, a power of two) */
#define COLLECT_PCS 1024    /* PCs per GetData call */
#define RECORDS_PER_MSG (PCS_CHUNK / sizeof(struct pcs_record))

struct pcs_api {
    CUptiResult (*Enable)(CUpti_PCSamplingEnableParams *);
    CUptiResult (*Disable)(CUpti_PCSamplingDisableParams *);
    CUptiResult (*SetConfigurationAttribute)(CUpti_PCSamplingConfigurationInfoParams *);
    CUptiResult (*GetData)(CUpti_PCSamplingGetDataParams *);
    CUptiResult (*GetNumStallReasons)(CUpti_PCSamplingGetNumStallReasonsParams *);
    CUptiResult (*GetStallReasons)(CUpti_PCSamplingGetStallReasonsParams *);
    CUptiResult (*GetCubinCrc)(CUpti_GetCubinCrcParams *);
    CUptiResult (*GetResultString)(CUptiResult, const char **);
};

struct pcs_context {
    CUcontext ctx;
    int on;
    uint64_t started_ns;
    CUpti_PCSamplingData data;    /* GetData's */
    CUpti_PCSamplingData config;  /* the configured buffer: what Disable leaves behind */
};

struct pcs_cubin {
    uint64_t crc;
    uint32_t module;
    size_t size;
    char *bytes;  /* NULL: a CRC sampled that no cubin has (not looked for again) */
    int sent;
};

/* A cubin found in memory (cubin_scan.h), its CRC computed once. */
struct pcs_resident {
    struct cubin_span span;
    uint64_t crc;
};

struct pcs_name_slot {
    uint64_t hash;
    uint64_t id;
    const char *name;  /* CUPTI's string (it asks that it be kept), or our copy */
};

static struct pcs_api api;
static pthread_mutex_t pcs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pcs_context contexts[MAX_CONTEXTS];
static struct pcs_cubin cubins[MAX_CUBINS];
static int ncubins;
static struct pcs_name_slot names[NAME_SLOTS];
static uint64_t next_name_id = 1;
static unsigned char stall_sent[1024];
static size_t num_stalls;
static uint32_t *stall_index;
static uint64_t total_samples, dropped_samples, non_user_samples;
static int active;
static uint32_t opt_period;        /* this start's options: deepctxd's (deepctx_pcs_config) or the environment's */
static uint64_t opt_duration_ms;
static struct pcs_resident *resident;  /* found at the first sample of an unknown cubin, once per start */
static int nresident, scanned;

static void send(uint32_t kind, const void *data, uint32_t len) {
    if (WATCHED(pcs))
        STAP_PROBE3(deepctx, pcs, kind, data, len);
}

static void send_status(int32_t code, uint32_t period, const char *text) {
    unsigned char buf[sizeof(struct pcs_status) + 256];
    struct pcs_status st = {code, period, total_samples, dropped_samples, non_user_samples};
    memcpy(buf, &st, sizeof(st));
    size_t n = text ? strnlen(text, 256) : 0;
    memcpy(buf + sizeof(st), text, n);
    send(PCS_MSG_STATUS, buf, (uint32_t)(sizeof(st) + n));
}

static const char *error_text(CUptiResult r) {
    const char *s = NULL;
    if (api.GetResultString && api.GetResultString(r, &s) == CUPTI_SUCCESS && s)
        return s;
    static __thread char buf[32];
    snprintf(buf, sizeof(buf), "CUPTI error %d", (int)r);
    return buf;
}

/* A failed call: unsupported devices say so in their own words, anything else is CUPTI's error. */
static void report_failure(const char *call, CUptiResult r) {
    char text[224];
    snprintf(text, sizeof(text), "%s: %s", call, error_text(r));
    send_status(r == CUPTI_ERROR_NOT_SUPPORTED ? PCS_E_UNSUPPORTED : PCS_E_CUPTI, 0, text);
}

void pcs_load(void *h) {
    api.Enable = (void *)dlsym(h, "cuptiPCSamplingEnable");
    api.Disable = (void *)dlsym(h, "cuptiPCSamplingDisable");
    api.SetConfigurationAttribute = (void *)dlsym(h, "cuptiPCSamplingSetConfigurationAttribute");
    api.GetData = (void *)dlsym(h, "cuptiPCSamplingGetData");
    api.GetNumStallReasons = (void *)dlsym(h, "cuptiPCSamplingGetNumStallReasons");
    api.GetStallReasons = (void *)dlsym(h, "cuptiPCSamplingGetStallReasons");
    api.GetCubinCrc = (void *)dlsym(h, "cuptiGetCubinCrc");
    api.GetResultString = (void *)dlsym(h, "cuptiGetResultString");
}

static int configured(void) { return __atomic_load_n(&deepctx_pcs_config.on, __ATOMIC_ACQUIRE) != 0; }

int pcs_wanted(void) {
    return WATCHED(pcs) && (configured() || agent_env_u64("DEEPCTX_PC_SAMPLING", 0) != 0);
}

/* The options of this start: deepctxd's when it configured the agent, else the environment's. */
static void read_options(void) {
    if (configured()) {
        opt_period = __atomic_load_n(&deepctx_pcs_config.period, __ATOMIC_RELAXED);
        opt_duration_ms = __atomic_load_n(&deepctx_pcs_config.duration_ms, __ATOMIC_RELAXED);
    } else {
        opt_period = (uint32_t)agent_env_u64("DEEPCTX_PC_PERIOD", 0);
        opt_duration_ms = agent_env_u64("DEEPCTX_PC_DURATION_MS", 0);
    }
    if (!opt_duration_ms)
        opt_duration_ms = 30000;
}

static void forget_sent(void);
static void existing_contexts(void);

void pcs_start(CUpti_SubscriberHandle subscriber,
               CUptiResult (*enable)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId)) {
    active = pcs_wanted();
    if (!active)
        return;
    if (!api.Enable || !api.Disable || !api.SetConfigurationAttribute || !api.GetData || !api.GetNumStallReasons ||
        !api.GetStallReasons || !api.GetCubinCrc) {
        send_status(PCS_E_NO_API, 0, "this libcupti has no PC sampling API (cupti_pcsampling.h)");
        active = 0;
        return;
    }
    read_options();
    enable(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
    enable(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
    enable(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
    enable(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING);
    pthread_mutex_lock(&pcs_lock);
    forget_sent();
    existing_contexts();  /* after the callbacks: a context made meanwhile comes through one or the other */
    pthread_mutex_unlock(&pcs_lock);
}

/* --- names and cubins ------------------------------------------------------------------------------ */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h ? h : 1;
}

static void send_named(uint32_t kind, uint64_t id, const char *name) {
    unsigned char buf[PCS_CHUNK];
    struct pcs_name_head head = {id};
    size_t n = strnlen(name, sizeof(buf) - sizeof(head));
    memcpy(buf, &head, sizeof(head));
    memcpy(buf + sizeof(head), name, n);
    send(kind, buf, (uint32_t)(sizeof(head) + n));
}

/* The function's id, its name sent the first time it is seen. 0: the table is full. */
static uint64_t name_id(const char *name) {
    if (!name)
        return 0;
    uint64_t h = fnv1a(name);
    for (uint32_t i = 0; i < NAME_SLOTS; i++) {
        struct pcs_name_slot *s = &names[(h + i) & (NAME_SLOTS - 1)];
        if (!s->hash) {
            s->hash = h;
            s->name = name;
            s->id = next_name_id++;
            send_named(PCS_MSG_NAME, s->id, name);
            return s->id;
        }
        if (s->hash == h && strcmp(s->name, name) == 0)
            return s->id;
    }
    return 0;
}

static void send_cubin(struct pcs_cubin *c) {
    unsigned char buf[PCS_CHUNK];
    struct pcs_cubin_head head = {c->crc, c->size, 0, c->module, 0};
    size_t room = sizeof(buf) - sizeof(head);
    for (size_t off = 0; off < c->size; off += room) {
        size_t n = c->size - off < room ? c->size - off : room;
        head.offset = off;
        memcpy(buf, &head, sizeof(head));
        memcpy(buf + sizeof(head), c->bytes + off, n);
        send(PCS_MSG_CUBIN, buf, (uint32_t)(sizeof(head) + n));
    }
    c->sent = 1;
}

static uint64_t cubin_crc(const void *bytes, size_t size) {
    CUpti_GetCubinCrcParams p = {CUpti_GetCubinCrcParamsSize, size, bytes, 0};
    return api.GetCubinCrc(&p) == CUPTI_SUCCESS ? p.cubinCrc : 0;
}

/* The cubins in the process's memory with their CRCs, looked for once a start (cubin_scan.h). */
static void scan_resident(void) {
    scanned = 1;
    nresident = 0;
    if (!resident)
        resident = calloc(MAX_RESIDENT, sizeof(*resident));
    struct cubin_span *spans = calloc(MAX_RESIDENT, sizeof(*spans));
    int n = resident && spans ? cubin_scan(spans, MAX_RESIDENT) : 0;
    char *buf = NULL;
    size_t cap = 0;
    for (int i = 0; i < n; i++) {
        if (spans[i].size > cap) {
            free(buf);
            cap = spans[i].size;
            buf = malloc(cap);
        }
        if (!buf) {
            cap = 0;
            continue;
        }
        if (cubin_copy(buf, spans[i].addr, spans[i].size) == 0)
            resident[nresident++] = (struct pcs_resident){spans[i], cubin_crc(buf, spans[i].size)};
    }
    free(buf);
    free(spans);
}

/* A sampled cubin the agent did not see loaded (its module was loaded before the agent): from memory, when
 * it is there; else noted as missing (deepctxd says its samples have no lines or SASS). */
static struct pcs_cubin *cubin_from_memory(uint64_t crc) {
    if (ncubins >= MAX_CUBINS)
        return NULL;
    if (!scanned)
        scan_resident();
    struct pcs_cubin *c = &cubins[ncubins++];
    *c = (struct pcs_cubin){crc, 0, 0, NULL, 1};
    for (int i = 0; i < nresident; i++) {
        if (resident[i].crc != crc)
            continue;
        size_t size = resident[i].span.size;
        char *copy = malloc(size);
        if (copy && cubin_copy(copy, resident[i].span.addr, size) == 0 && cubin_crc(copy, size) == crc) {
            *c = (struct pcs_cubin){crc, 0, size, copy, 0};
            return c;
        }
        free(copy);
    }
    return c;
}

/* The cubin a sample is in, handed over with its first sample (most loaded modules are never sampled). */
static void need_cubin(uint64_t crc) {
    struct pcs_cubin *c = NULL;
    for (int i = 0; i < ncubins && !c; i++)
        if (cubins[i].crc == crc)
            c = &cubins[i];
    if (!c)
        c = cubin_from_memory(crc);
    if (c && c->bytes && !c->sent)
        send_cubin(c);
}

/* A new start (a new capture): its reader has seen no name, stall reason or cubin yet, and counts afresh. */
static void forget_sent(void) {
    memset(names, 0, sizeof(names));
    next_name_id = 1;
    memset(stall_sent, 0, sizeof(stall_sent));
    int kept = 0;
    for (int i = 0; i < ncubins; i++) {
        if (cubins[i].bytes) {  /* the missing ones are looked for again: modules may have been loaded since */
            cubins[kept] = cubins[i];
            cubins[kept++].sent = 0;
        }
    }
    ncubins = kept;
    scanned = 0;
    total_samples = dropped_samples = non_user_samples = 0;
}

static void module_loaded(const CUpti_ModuleResourceData *m) {
    if (!m || !m->pCubin || !m->cubinSize || ncubins >= MAX_CUBINS)
        return;
    CUpti_GetCubinCrcParams p = {CUpti_GetCubinCrcParamsSize, m->cubinSize, m->pCubin, 0};
    if (api.GetCubinCrc(&p) != CUPTI_SUCCESS)
        return;
    for (int i = 0; i < ncubins; i++)
        if (cubins[i].crc == p.cubinCrc)
            return;
    char *copy = malloc(m->cubinSize);  /* valid only inside the callback */
    if (!copy)
        return;
    memcpy(copy, m->pCubin, m->cubinSize);
    cubins[ncubins++] = (struct pcs_cubin){p.cubinCrc, m->moduleId, m->cubinSize, copy, 0};
}

/* --- contexts ---------------------------------------------------------------------------------------- */

static void free_data(CUpti_PCSamplingData *d) {
    if (d->pPcData) {
        for (size_t i = 0; i < d->collectNumPcs; i++)
            free(d->pPcData[i].stallReason);
        free(d->pPcData);
    }
    memset(d, 0, sizeof(*d));
}

/* A context's buffers, allocated at its creation; freed when its slot is given up (a half-made one too). */
static int alloc_data(CUpti_PCSamplingData *d) {
    memset(d, 0, sizeof(*d));
    d->size = sizeof(*d);
    d->collectNumPcs = COLLECT_PCS;
    d->pPcData = calloc(COLLECT_PCS, sizeof(CUpti_PCSamplingPCData));
    if (!d->pPcData)
        return -1;
    for (size_t i = 0; i < COLLECT_PCS; i++) {
        d->pPcData[i].size = sizeof(CUpti_PCSamplingPCData);
        d->pPcData[i].stallReason = calloc(num_stalls ? num_stalls : 1, sizeof(CUpti_PCSamplingStallReason));
        if (!d->pPcData[i].stallReason)
            return -1;
    }
    return 0;
}

static void send_stall_names(CUcontext ctx) {
    char **text = calloc(num_stalls, sizeof(char *));
    uint32_t *index = calloc(num_stalls, sizeof(uint32_t));
    for (size_t i = 0; text && i < num_stalls; i++)
        text[i] = calloc(1, CUPTI_STALL_REASON_STRING_SIZE);
    CUpti_PCSamplingGetStallReasonsParams p = {CUpti_PCSamplingGetStallReasonsParamsSize, NULL, ctx, num_stalls,
                                               index, text};
    if (text && index && api.GetStallReasons(&p) == CUPTI_SUCCESS) {
        for (size_t i = 0; i < num_stalls; i++) {
            if (index[i] < sizeof(stall_sent) && !stall_sent[index[i]] && text[i]) {
                stall_sent[index[i]] = 1;
                send_named(PCS_MSG_STALL, index[i], text[i]);
            }
        }
        free(stall_index);
        stall_index = index;  /* every reason is collected: the configuration names them all */
        index = NULL;
    }
    for (size_t i = 0; text && i < num_stalls; i++)
        free(text[i]);
    free(text);
    free(index);
}

/* The device the context runs on, from the driver (the analyzer reads its SM count and architecture). */
static void send_device(CUcontext ctx) {
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);  /* loaded: it called us */
    if (!cu)
        return;
    CUresult (*get_device)(CUdevice *) = (void *)dlsym(cu, "cuCtxGetDevice");
    CUresult (*attribute)(int *, CUdevice_attribute, CUdevice) = (void *)dlsym(cu, "cuDeviceGetAttribute");
    CUresult (*get_name)(char *, int, CUdevice) = (void *)dlsym(cu, "cuDeviceGetName");
    CUresult (*push)(CUcontext) = (void *)dlsym(cu, "cuCtxPushCurrent_v2");
    CUresult (*pop)(CUcontext *) = (void *)dlsym(cu, "cuCtxPopCurrent_v2");
    dlclose(cu);  /* the NOLOAD reference only */
    CUdevice dev = 0;
    if (!get_device || !attribute)
        return;
    int pushed = push && pop && push(ctx) == CUDA_SUCCESS;  /* cuCtxGetDevice asks the current context */
    CUresult r = get_device(&dev);
    if (pushed) {
        CUcontext popped;
        pop(&popped);
    }
    if (r != CUDA_SUCCESS)
        return;
    struct pcs_device d;
    memset(&d, 0, sizeof(d));
    int v = 0;
    d.ordinal = (uint32_t)dev;
    if (attribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS)
        d.sm_count = (uint32_t)v;
    if (attribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) == CUDA_SUCCESS)
        d.cc_major = (uint32_t)v;
    if (attribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) == CUDA_SUCCESS)
        d.cc_minor = (uint32_t)v;
    if (get_name)
        get_name(d.name, (int)sizeof(d.name) - 1, dev);
    send(PCS_MSG_DEVICE, &d, sizeof(d));
}

/* The slot back for another context: its buffers freed (CUPTI no longer holds them: disabled or never on). */
static void release_context(struct pcs_context *c) {
    free_data(&c->data);
    free_data(&c->config);
    c->on = 0;
    c->ctx = NULL;
}

static int known_context(CUcontext ctx) {
    for (int i = 0; i < MAX_CONTEXTS; i++)
        if (contexts[i].ctx == ctx)
            return 1;
    return 0;
}

/* Sampling on in ctx, once (a context found at the start can also come through CONTEXT_CREATED). */
static void context_created(CUcontext ctx) {
    if (!ctx || known_context(ctx))
        return;
    struct pcs_context *c = NULL;
    for (int i = 0; i < MAX_CONTEXTS && !c; i++)
        if (!contexts[i].ctx)
            c = &contexts[i];
    if (!c)
        return;
    send_device(ctx);
    CUpti_PCSamplingEnableParams en = {CUpti_PCSamplingEnableParamsSize, NULL, ctx};
    CUptiResult r = api.Enable(&en);
    if (r != CUPTI_SUCCESS) {
        report_failure("cuptiPCSamplingEnable", r);
        return;
    }
    size_t n = 0;
    CUpti_PCSamplingGetNumStallReasonsParams np = {CUpti_PCSamplingGetNumStallReasonsParamsSize, NULL, ctx, &n};
    r = api.GetNumStallReasons(&np);
    if (r != CUPTI_SUCCESS || !n) {
        report_failure("cuptiPCSamplingGetNumStallReasons", r);
        CUpti_PCSamplingDisableParams dis = {CUpti_PCSamplingDisableParamsSize, NULL, ctx};
        api.Disable(&dis);
        return;
    }
    if (n > num_stalls)
        num_stalls = n;
    send_stall_names(ctx);
    c->ctx = ctx;
    if (alloc_data(&c->data) != 0 || alloc_data(&c->config) != 0) {
        send_status(PCS_E_CUPTI, 0, "out of memory for the PC sampling buffers");
        CUpti_PCSamplingDisableParams dis = {CUpti_PCSamplingDisableParamsSize, NULL, ctx};
        api.Disable(&dis);
        release_context(c);
        return;
    }
    uint32_t period = opt_period;
    CUpti_PCSamplingConfigurationInfo info[6];
    memset(info, 0, sizeof(info));
    size_t k = 0;
    info[k].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
    info[k].attributeData.stallReasonData.stallReasonCount = num_stalls;
    info[k++].attributeData.stallReasonData.pStallReasonIndex = stall_index;
    info[k].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
    info[k++].attributeData.samplingDataBufferData.samplingDataBuffer = &c->config;
    info[k].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
    info[k++].attributeData.collectionModeData.collectionMode = CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
    info[k].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT;
    info[k++].attributeData.outputDataFormatData.outputDataFormat = CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED;
    if (period) {
        info[k].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
        info[k++].attributeData.samplingPeriodData.samplingPeriod = period;
    }
    CUpti_PCSamplingConfigurationInfoParams cp = {CUpti_PCSamplingConfigurationInfoParamsSize, NULL, ctx, k, info};
    r = api.SetConfigurationAttribute(&cp);
    if (r != CUPTI_SUCCESS) {
        report_failure("cuptiPCSamplingSetConfigurationAttribute", r);
        CUpti_PCSamplingDisableParams dis = {CUpti_PCSamplingDisableParamsSize, NULL, ctx};
        api.Disable(&dis);
        release_context(c);
        return;
    }
    c->on = 1;
    c->started_ns = agent_monotonic_ns();
    send_status(PCS_ON, period, NULL);
}

/* The contexts there before this start: an earlier capture's are let go (one destroyed while nobody sampled
 * would be a dangling handle), then every active primary context is sampled (attach: the agent came after
 * they were made, so no CONTEXT_CREATED callback names them). A context made with cuCtxCreate before the
 * start cannot be found: its kernels are not sampled. */
static void existing_contexts(void) {
    for (int i = 0; i < MAX_CONTEXTS; i++)
        if (contexts[i].ctx && !contexts[i].on)
            release_context(&contexts[i]);
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!cu)
        return;
    CUresult (*count)(int *) = (void *)dlsym(cu, "cuDeviceGetCount");
    CUresult (*state)(CUdevice, unsigned *, int *) = (void *)dlsym(cu, "cuDevicePrimaryCtxGetState");
    CUresult (*retain)(CUcontext *, CUdevice) = (void *)dlsym(cu, "cuDevicePrimaryCtxRetain");
    CUresult (*release)(CUdevice) = (void *)dlsym(cu, "cuDevicePrimaryCtxRelease_v2");
    if (!release)
        release = (void *)dlsym(cu, "cuDevicePrimaryCtxRelease");
    dlclose(cu);  /* the NOLOAD reference only */
    int n = 0;
    if (!count || !state || !retain || !release || count(&n) != CUDA_SUCCESS)
        return;
    for (CUdevice dev = 0; dev < n; dev++) {
        unsigned flags = 0;
        int on = 0;
        CUcontext ctx = NULL;
        if (state(dev, &flags, &on) != CUDA_SUCCESS || !on || retain(&ctx, dev) != CUDA_SUCCESS)
            continue;
        context_created(ctx);
        release(dev);  /* the program's own reference keeps it */
    }
}

/* --- records ----------------------------------------------------------------------------------------- */

static void send_records(const CUpti_PCSamplingData *d) {
    struct pcs_record batch[RECORDS_PER_MSG];
    uint32_t n = 0;
    for (size_t i = 0; i < d->totalNumPcs && i < d->collectNumPcs; i++) {
        const CUpti_PCSamplingPCData *pc = &d->pPcData[i];
        uint64_t id = name_id(pc->functionName);
        need_cubin(pc->cubinCrc);
        for (size_t s = 0; s < pc->stallReasonCount; s++) {
            if (!pc->stallReason[s].samples)
                continue;
            uint32_t reason = pc->stallReason[s].pcSamplingStallReasonIndex;
            batch[n++] = (struct pcs_record){pc->cubinCrc, pc->pcOffset, id, reason, pc->stallReason[s].samples,
                                             pc->correlationId, pc->functionIndex};
            if (n == RECORDS_PER_MSG) {
                send(PCS_MSG_RECORDS, batch, (uint32_t)(n * sizeof(batch[0])));
                n = 0;
            }
        }
    }
    if (n)
        send(PCS_MSG_RECORDS, batch, (uint32_t)(n * sizeof(batch[0])));
    total_samples += d->totalSamples;
    dropped_samples += d->droppedSamples;
    non_user_samples += d->nonUsrKernelsTotalSamples;
}

/* Everything CUPTI holds for c; final: then sampling ends there (Disable leaves the rest in the
 * configured buffer). */
static void drain_context(struct pcs_context *c, int final) {
    if (!c->on)
        return;
    for (int rounds = 0; rounds < 64; rounds++) {
        c->data.totalNumPcs = 0;
        c->data.remainingNumPcs = 0;
        CUpti_PCSamplingGetDataParams gp = {CUpti_PCSamplingGetDataParamsSize, NULL, c->ctx, &c->data};
        CUptiResult r = api.GetData(&gp);
        if (r != CUPTI_SUCCESS) {
            report_failure("cuptiPCSamplingGetData", r);
            final = 1;
            break;
        }
        send_records(&c->data);
        if (!c->data.remainingNumPcs)
            break;
    }
    if (!final)
        return;
    CUpti_PCSamplingDisableParams dis = {CUpti_PCSamplingDisableParamsSize, NULL, c->ctx};
    c->config.totalNumPcs = 0;
    if (api.Disable(&dis) == CUPTI_SUCCESS)
        send_records(&c->config);
    c->on = 0;
    send_status(PCS_DONE, 0, NULL);
}

void pcs_collect(int final) {
    if (!active)
        return;
    pthread_mutex_lock(&pcs_lock);
    uint64_t limit_ns = opt_duration_ms * 1000000ull;
    uint64_t now = agent_monotonic_ns();
    for (int i = 0; i < MAX_CONTEXTS; i++) {
        struct pcs_context *c = &contexts[i];
        if (c->ctx && c->on)
            drain_context(c, final || now - c->started_ns >= limit_ns);  /* the bounded duration */
    }
    pthread_mutex_unlock(&pcs_lock);
}

void pcs_on_resource(CUpti_CallbackId cbid, const CUpti_ResourceData *data) {
    if (!active || !data)
        return;
    pthread_mutex_lock(&pcs_lock);
    if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
        context_created(data->context);
    } else if (cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
        module_loaded(data->resourceDescriptor);
    } else if (cbid == CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING) {
        /* continuous collection: CUPTI asks for the data before a module goes (its PCs may be reused) */
        for (int i = 0; i < MAX_CONTEXTS; i++)
            if (contexts[i].ctx == data->context)
                drain_context(&contexts[i], 0);
    } else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
        for (int i = 0; i < MAX_CONTEXTS; i++) {
            if (contexts[i].ctx == data->context) {
                drain_context(&contexts[i], 1);
                release_context(&contexts[i]);
            }
        }
    }
    pthread_mutex_unlock(&pcs_lock);
}
