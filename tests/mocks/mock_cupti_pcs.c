/* The mock CUPTI's PC Sampling API (cupti_pcsampling.h), part of libcupti.so.13: each launch of a kernel
 * adds the samples MOCK_PCS_SAMPLES lists for its name, so a test knows every PC, stall reason and count:
 *   MOCK_PCS_SAMPLES="saxpy@0xd0:11:3,saxpy@0x100:13:1,strided_copy@0x90:11:5"
 *       per launch of saxpy: 3 samples at pc offset 0xd0 of stall reason 11, 1 at 0x100 of reason 13 ...
 *   MOCK_PCS_UNSUPPORTED=1   cuptiPCSamplingEnable fails with CUPTI_ERROR_NOT_SUPPORTED (a GPU without it)
 * Stall reasons have indices 10.. (not their positions: CUPTI's are not either). Samples pile up until
 * cuptiPCSamplingGetData takes them; cuptiPCSamplingDisable leaves the rest in the configured buffer, as
 * CUPTI documents. The cubin CRC is FNV-1a over the cubin's bytes (CUPTI's own is undocumented): samples
 * carry the CRC of the module the mock driver loaded (one), whether or not a subscriber saw it loaded. PC
 * sampling is enabled per context: any the driver made, also one made before the subscriber (attach). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>
#include <cupti_pcsampling.h>

#define EXPORT __attribute__((visibility("default")))
#define MAX_PCS 256
#define STALL_BASE 10

static const char *const STALLS[] = {
    "smsp__pcsamp_warps_issue_stalled_barrier",       "smsp__pcsamp_warps_issue_stalled_long_scoreboard",
    "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle", "smsp__pcsamp_warps_issue_stalled_selected",
    "smsp__pcsamp_warps_issue_stalled_short_scoreboard", "smsp__pcsamp_warps_issue_stalled_wait",
    "smsp__pcsamp_warps_issue_stalled_mio_throttle",  "smsp__pcsamp_warps_issue_stalled_lg_throttle",
    "smsp__pcsamp_warps_issue_stalled_branch_resolving", "smsp__pcsamp_warps_issue_stalled_no_instructions",
};
#define NSTALLS (sizeof(STALLS) / sizeof(STALLS[0]))

struct pending {
    char name[256];
    uint64_t pc;
    uint32_t counts[NSTALLS];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending pending[MAX_PCS];
static int npending;
static int enabled;
static uint64_t crc;
static CUpti_PCSamplingData *config_buffer;
static uint64_t taken;  /* samples handed over (GetData and Disable) */

int mockcupti_pcs_enabled(void) { return enabled; }

static int unsupported(void) {
    const char *s = getenv("MOCK_PCS_UNSUPPORTED");
    return s && *s == '1';
}

EXPORT CUptiResult cuptiPCSamplingEnable(CUpti_PCSamplingEnableParams *p) {
    if (!p || p->size < CUpti_PCSamplingEnableParamsSize)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!p->ctx)
        return CUPTI_ERROR_INVALID_CONTEXT;
    if (unsupported())
        return CUPTI_ERROR_NOT_SUPPORTED;
    enabled = 1;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPCSamplingGetNumStallReasons(CUpti_PCSamplingGetNumStallReasonsParams *p) {
    if (!enabled)
        return CUPTI_ERROR_INVALID_OPERATION;
    *p->numStallReasons = NSTALLS;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPCSamplingGetStallReasons(CUpti_PCSamplingGetStallReasonsParams *p) {
    if (!enabled || p->numStallReasons < NSTALLS)
        return CUPTI_ERROR_INVALID_PARAMETER;
    for (size_t i = 0; i < NSTALLS; i++) {
        p->stallReasonIndex[i] = (uint32_t)(STALL_BASE + i);
        snprintf(p->stallReasons[i], CUPTI_STALL_REASON_STRING_SIZE, "%s", STALLS[i]);
    }
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPCSamplingSetConfigurationAttribute(CUpti_PCSamplingConfigurationInfoParams *p) {
    if (!enabled)
        return CUPTI_ERROR_INVALID_OPERATION;
    for (size_t i = 0; i < p->numAttributes; i++) {
        CUpti_PCSamplingConfigurationInfo *a = &p->pPCSamplingConfigurationInfo[i];
        if (a->attributeType == CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER)
            config_buffer = a->attributeData.samplingDataBufferData.samplingDataBuffer;
        if (a->attributeType == CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD &&
            (a->attributeData.samplingPeriodData.samplingPeriod < 5 ||
             a->attributeData.samplingPeriodData.samplingPeriod > 31))
            return CUPTI_ERROR_INVALID_PARAMETER;
    }
    return CUPTI_SUCCESS;
}

static uint64_t fnv1a(const void *data, size_t size) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ ((const unsigned char *)data)[i]) * 0x100000001b3ull;
    return h;
}

EXPORT CUptiResult cuptiGetCubinCrc(CUpti_GetCubinCrcParams *p) {
    if (!p || !p->cubin || !p->cubinSize)
        return CUPTI_ERROR_INVALID_PARAMETER;
    p->cubinCrc = fnv1a(p->cubin, p->cubinSize);
    return CUPTI_SUCCESS;
}

/* The mock driver loaded a module (mock_cuda.c): its samples carry its CRC. */
EXPORT void mockcupti_pcs_module(const void *cubin, size_t size) {
    pthread_mutex_lock(&lock);
    crc = fnv1a(cubin, size);
    pthread_mutex_unlock(&lock);
}

/* Moves the pending samples into d (as many PCs as it holds); the rest stay for the next call. */
static void take(CUpti_PCSamplingData *d) {
    size_t n = 0;
    d->totalSamples = 0;
    while (npending && n < d->collectNumPcs) {
        struct pending *src = &pending[--npending];
        CUpti_PCSamplingPCData *pc = &d->pPcData[n++];
        pc->cubinCrc = crc;
        pc->pcOffset = src->pc;
        pc->functionIndex = 0;
        pc->functionName = strdup(src->name);  /* CUPTI's to allocate, the user's to free */
        pc->correlationId = 0;
        size_t k = 0;
        for (size_t s = 0; s < NSTALLS; s++) {
            if (src->counts[s]) {
                pc->stallReason[k].pcSamplingStallReasonIndex = (uint32_t)(STALL_BASE + s);
                pc->stallReason[k++].samples = src->counts[s];
                d->totalSamples += src->counts[s];
            }
        }
        pc->stallReasonCount = k;
    }
    d->totalNumPcs = n;
    d->remainingNumPcs = (size_t)npending;
    d->droppedSamples = 0;
    d->nonUsrKernelsTotalSamples = 0;
    taken += d->totalSamples;
}

EXPORT CUptiResult cuptiPCSamplingGetData(CUpti_PCSamplingGetDataParams *p) {
    if (!enabled)
        return CUPTI_ERROR_INVALID_OPERATION;
    pthread_mutex_lock(&lock);
    take(p->pcSamplingData);
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPCSamplingDisable(CUpti_PCSamplingDisableParams *p) {
    (void)p;
    if (!enabled)
        return CUPTI_ERROR_INVALID_OPERATION;
    pthread_mutex_lock(&lock);
    if (config_buffer)
        take(config_buffer);
    enabled = 0;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

static void add(const char *name, uint64_t pc, uint32_t reason, uint32_t count) {
    if (reason < STALL_BASE || reason >= STALL_BASE + NSTALLS)
        return;
    for (int i = 0; i < npending; i++) {
        if (pending[i].pc == pc && strcmp(pending[i].name, name) == 0) {
            pending[i].counts[reason - STALL_BASE] += count;
            return;
        }
    }
    if (npending == MAX_PCS)
        return;
    struct pending *p = &pending[npending++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->pc = pc;
    p->counts[reason - STALL_BASE] = count;
}

/* A kernel ran (mockcupti_kernel): its samples, while sampling is enabled. */
void mockcupti_pcs_kernel(const char *name) {
    const char *spec = getenv("MOCK_PCS_SAMPLES");
    if (!spec || !name)
        return;
    pthread_mutex_lock(&lock);
    if (enabled) {
        char *copy = strdup(spec);
        char *save = NULL;
        for (char *e = strtok_r(copy, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
            char fn[256];
            unsigned long long pc = 0;
            unsigned reason = 0, count = 0;
            if (sscanf(e, "%255[^@]@%llx:%u:%u", fn, &pc, &reason, &count) == 4 && strcmp(fn, name) == 0)
                add(name, pc, reason, count);
        }
        free(copy);
    }
    pthread_mutex_unlock(&lock);
}

EXPORT uint64_t mockcupti_pcs_taken(void) { return __atomic_load_n(&taken, __ATOMIC_RELAXED); }
