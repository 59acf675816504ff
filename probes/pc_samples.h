/* PC sampling: what the CUPTI agent (native/pc_sampling.c) hands deepctxd through USDT probe
 *   pcs(u32 kind, const void *data, u32 len)      provider "deepctx"
 * and what pc_samples.bpf.c copies, unchanged, into the ring buffer dev_pcs (probes/pc_sampling.py reads
 * it). One probe for every kind of message keeps the BPF side a byte copy: records, names, cubins and
 * statuses differ only in how user space decodes `data`. Its semaphore is the daemon's "sample PCs"
 * request: the agent samples only while it is raised and PC sampling is asked for, by the process's
 * environment (DEEPCTX_PC_SAMPLING=1, set by `deepctx run --pc-sampling`) or by deepctxd through the agent's
 * deepctx_pcs_config (struct pcs_config, written into the process by `deepctx attach --pc-sampling`).
 * Layouts are checked by tests/integration/device/test_pc_sampling.py against gcc's. */
#ifndef DEEPCTX_PC_SAMPLES_H
#define DEEPCTX_PC_SAMPLES_H

#include <linux/types.h>

/* Bytes of `data` one message carries at most: longer payloads (cubins) come in chunks. */
#define PCS_CHUNK 4088
/* The ring buffer's data area: a power of two, so that BPF bounds the copy with a mask. */
#define PCS_DATA 4096

enum pcs_kind {
    PCS_MSG_RECORDS = 1,   /* struct pcs_record[len / sizeof(struct pcs_record)] */
    PCS_MSG_NAME = 2,      /* struct pcs_name_head, then the function's (mangled) name, no NUL */
    PCS_MSG_CUBIN = 3,     /* struct pcs_cubin_head, then up to PCS_CHUNK - its size bytes of the cubin */
    PCS_MSG_STALL = 4,     /* struct pcs_name_head (id: CUPTI's stall reason index), then its name */
    PCS_MSG_STATUS = 5,    /* struct pcs_status, then a sentence (no NUL) */
    PCS_MSG_DEVICE = 6,    /* struct pcs_device */
};

/* One PC's samples of one stall reason, summed over what one collection handed over. */
struct pcs_record {
    __u64 cubin_crc;    /* CUPTI's CRC of the cubin the function is in (a PCS_MSG_CUBIN's crc) */
    __u64 pc_offset;    /* from the start of the function */
    __u64 name;         /* the function's name id (a PCS_MSG_NAME's id) */
    __u32 stall;        /* CUPTI's stall reason index (a PCS_MSG_STALL's id) */
    __u32 samples;
    __u32 correlation;  /* the launch's correlation id (serialized collection only; 0: continuous) */
    __u32 function_index;
};

struct pcs_name_head {
    __u64 id;
};

struct pcs_cubin_head {
    __u64 crc;
    __u64 size;     /* the whole cubin's */
    __u64 offset;   /* of this chunk */
    __u32 module;   /* CUDA's module id */
    __u32 pad;
};

enum pcs_status_code {
    PCS_ON = 1,            /* sampling started (period: the log2 of the cycles between samples) */
    PCS_DONE = 2,          /* sampling ended: totals */
    PCS_E_UNSUPPORTED = -1,  /* the device or driver does not support PC sampling */
    PCS_E_CUPTI = -2,        /* a PC sampling call failed */
    PCS_E_NO_API = -3,       /* this libcupti has no PC sampling API */
};

struct pcs_status {
    __s32 code;           /* enum pcs_status_code */
    __u32 period;         /* log2 of the sampling period in cycles (CUPTI's SAMPLING_PERIOD) */
    __u64 total_samples;  /* PCS_DONE: samples CUPTI took */
    __u64 dropped_samples;  /* PCS_DONE: samples CUPTI dropped (hardware buffer full) */
    __u64 non_user_samples;  /* PCS_DONE: samples in kernels that are not the program's */
};

struct pcs_device {
    __u32 ordinal;
    __u32 sm_count;
    __u32 cc_major;
    __u32 cc_minor;
    char name[256];
};

/* The agent's exported variable deepctx_pcs_config: PC sampling's options, written into the process by
 * deepctxd (attach: the environment cannot carry them) before it raises the pcs probe's semaphore; the
 * agent reads them when it starts. on 0: the environment's options (DEEPCTX_PC_*) hold. */
struct pcs_config {
    __u32 on;           /* 1: sample, with these options */
    __u32 period;       /* log2 of the cycles between samples, 5..31; 0: CUPTI's default */
    __u32 duration_ms;  /* sampling stops this long after it started in a context; 0: 30000 */
    __u32 pad;
};

/* What the ring buffer holds per message. */
struct pcs_event {
    __u32 pid;
    __u32 kind;
    __u32 len;    /* bytes of data (at most PCS_CHUNK) */
    __u32 cut;    /* 1 when the agent passed more than PCS_CHUNK bytes: the rest is lost */
    __u8 data[PCS_DATA];
};

#endif
