/* Structs shared by the CUPTI agent (native/deepctx_cupti.c), device_activity.bpf.c and
 * probes/device_activity.py (checked by tests/integration/device/test_device_layouts.py).
 *
 * The agent inside the target only reports, through USDT probes of provider "deepctx":
 *   correlation(u32 correlation_id, u32 api, const char *function_name)
 *       in the thread that makes a launch / copy / set / sync API call, at its entry (CUPTI callback);
 *       every call, or while the sampling semaphore is raised a sample of them (agent_sample_due())
 *   api_exit(u32 correlation_id)                     at the call's exit (trace mode only)
 *   batch(const struct dev_record *records, u32 n)   per batch of completed activity records
 *   flushed(u64 sequence, u64 started_ns, u64 dropped, u64 unfinished)  after each flush of CUPTI's
 *                                                    buffers (a stop's: started_ns is when activity stopped)
 *   status(s32 code)                                 when the agent starts, stops or fails to start
 *   flush_request()                                  after each flush the daemon requested: its
 *                                                    semaphore is the daemon's "flush now" request
 *                                                    (the kernel raises it)
 *   sampling()                                       when reporting starts in a sampled capture: its
 *                                                    semaphore asks the agent to announce a sample of
 *                                                    the calls, not every one
 *   graph_node(u64 node, u64 original, u32 corr)    when CUDA makes a graph node inside announced call corr
 *                                                    (a launch captured from a stream, a node added; original
 *                                                    0), or clones node `original` into another (an
 *                                                    instantiation copies each node into the executable
 *                                                    graph, whose node ids the kernel records carry; corr 0)
 *   stop_request()                                   while the daemon asks the agent to stop: its
 *                                                    semaphore is the request; the agent stops, hands
 *                                                    over every record (a forced flush) while the batch
 *                                                    probe is still there, says idle and stays stopped
 *                                                    until the batch probe goes
 * Every probe is semaphore-guarded: an agent nobody watches does not even build the arguments. */
#ifndef DEEPCTX_DEVICE_ACTIVITY_H
#define DEEPCTX_DEVICE_ACTIVITY_H

#include <linux/types.h>

#include "gpu_api.h"

enum dev_kind {
    DEV_KIND_KERNEL = 1,
    DEV_KIND_MEMCPY = 2,
    DEV_KIND_MEMSET = 3,
    DEV_KIND_SYNC = 4,
};

/* Records per batch probe: the BPF program reads at most this many per firing. */
#define DEV_BATCH 64

/* One completed activity record, as the agent passes it to the batch probe. Times are
 * CLOCK_MONOTONIC nanoseconds (the agent gives CUPTI that clock), the clock of bpf_ktime_get_ns(). */
struct dev_record {
    __u64 start_ns;
    __u64 end_ns;
    __u64 bytes;         /* memcpy / memset: bytes; kernel: 0 */
    __u64 name;          /* kernel: address of CUPTI's name string in the target (stable: an id) */
    __u64 graph_node;    /* CUDA graph node id; 0 when not launched through a graph */
    __u32 correlation;   /* CUPTI correlation id: the one the correlation probe announced */
    __u32 stream;        /* CUPTI stream id */
    __u32 device;
    __u8 kind;           /* enum dev_kind */
    __u8 copy_kind;      /* memcpy: CUpti_ActivityMemcpyKind; sync: CUpti_ActivitySynchronizationType */
    __u16 flags;         /* DEV_REC_F_* */
    __u32 sample;        /* sampled captures: the correlation id of the announced call that stands for
                            this record's call (the same thread's last one announced); 0: none */
    __u32 grid[3];       /* kernel: launch shape, from the record (calls the API probes do not see) */
    __u32 block[3];
    __u32 shared_mem;    /* kernel: dynamic shared memory bytes */
    __u32 api_ns;        /* exact captures: how long the API call that made it ran (CPU ns, the agent's
                            enter to exit callback; 0: not timed), for calls no uprobe times */
    __u32 pad;
};

#define DEV_REC_F_GRAPH (1u << 0)    /* part of a CUDA graph launch: one correlation id, many records */
#define DEV_REC_F_SAMPLED (1u << 1)  /* joined through `sample`, not its own correlation id */

/* What the `api` argument of the correlation probe packs: CUPTI domain << 16 | callback id. */
#define DEV_API_DOMAIN_SHIFT 16

/* An API call with device work in flight in the kernel's view. Its call path key, struct gpu_key
 * (gpu_api.h), is kept by value. */
struct dev_corr {
    struct gpu_key call;
    __u64 api_start_ns;  /* when CUPTI's enter callback ran */
    __u64 fn_name;       /* CUPTI's function name string (a constant in libcupti: an id) */
    __u32 api;           /* domain << 16 | cbid */
    __u32 joined;        /* a record has been joined to it */
};

/* The join table: two rings, no hashing, no lock and no delete per call (an LRU hash map's update cost more
 * than the rest of the correlation probe). dev_corr holds the calls in the order they were reported, a slot
 * each (a struct dev_corr_slot; key names the id it holds now, pid 0: none), taken again by the call
 * DEV_CORR_ENTRIES later. dev_corr_ids, indexed by the correlation id, holds id << 32 | the call's slot:
 * CUPTI's and rocprofiler's ids count up in each process (each capture has its own maps), and PyTorch
 * spends about 16 of them per call reported, so it has DEV_CORR_IDS entries of 8 bytes (a ring of full
 * slots by id would need 16 times as many). */
struct dev_corr_slot {
    struct gpu_corr_key key;
    struct dev_corr corr;
};
/* A call whose slot (or id entry) is taken again while it is this young and never joined may still get
 * records: counted as dropped. */
#define DEV_CORR_YOUNG_NS 1000000000ULL

/* Aggregation: GPU time per (call path, kernel name / copy kind, device). */
struct dev_key {
    struct gpu_key call;
    __u64 name;          /* kernel name id (see dev_record.name), 0 for copies and sets */
    __u64 fn_name;       /* the API's name string, for calls the GPU API probes did not see (else 0) */
    __u32 device;
    __u8 kind;           /* enum dev_kind */
    __u8 copy_kind;
    __u16 flags;         /* DEV_KEY_F_* */
};

#define DEV_KEY_F_UNKNOWN (1u << 0)    /* no correlation recorded for the record's id */
#define DEV_KEY_F_UNPROBED (1u << 1)   /* the call was not one the GPU API probes track: path taken here */
#define DEV_KEY_F_GRAPH (1u << 2)      /* the record came from a CUDA graph launch */
#define DEV_KEY_F_SAMPLED (1u << 3)    /* charged to the path of the sampled call that stands for its call */

struct dev_val {
    __u64 count;         /* records */
    __u64 time_ns;       /* sum of end - start */
    __u64 bytes;
    __u64 api_time_ns;   /* sum of api_ns of calls the agent alone reported (not graphs': one call, many records) */
};

/* CUDA graph nodes by id (dev_graph_nodes): the key of the API call that made the node, which its clones
 * inherit. A replayed node's records go under the graph launch's path, then the path that made the node:
 * the record's key holds the latter in its origin fields, labelled DEV_GRAPH_MADE_LABEL (daemon/device_tree.py). */
struct dev_graph_key {
    __u32 pid;
    __u32 pad;
    __u64 node;
};
#define DEV_GRAPH_MADE_LABEL 0xfffe  /* gpu_key.origin_label: origin_* is where the record's graph node was made */

/* Kernel names: (pid, address of the string) -> the string, copied by BPF at first sight. */
#define DEV_NAME_LEN 512
struct dev_name_key {
    __u32 pid;
    __u32 pad;
    __u64 addr;
};
struct dev_name {
    char name[DEV_NAME_LEN];
};

/* Trace mode: one event per API call and per record, through a ring buffer. */
enum dev_event_type {
    DEV_EV_API = 1,      /* a CPU-side API call with device work (start = entry, end = exit) */
    DEV_EV_RECORD = 2,   /* a kernel, copy, set or sync on the device */
};
struct dev_event {
    __u64 start_ns;
    __u64 end_ns;
    __u64 bytes;
    __u64 name;          /* record: kernel name id; API: CUPTI's function name string */
    __u64 graph_node;
    __u64 user_stack;
    __u64 py_stack;
    __u64 stream_handle; /* the API's stream argument (gpu_key.stream) */
    __u32 pid;
    __u32 tid;           /* the thread that made the call */
    __u32 correlation;
    __u32 stream;        /* record: CUPTI stream id */
    __u32 device;        /* record: the GPU; API: CUPTI domain << 16 | callback id */
    __u16 api_id;        /* gpu_apis index; DEV_API_UNPROBED when the probes did not see the call */
    __u8 type;           /* enum dev_event_type */
    __u8 kind;           /* record: enum dev_kind */
    __u8 copy_kind;
    __u8 known;          /* record: its correlation was known */
    __u16 pad;
};

#define DEV_API_UNPROBED 0xffff

/* The agent's last flush, as the flushed probe reported it (dev_flush[0]). */
struct dev_flush {
    __u64 sequence;
    __u64 started_ns;    /* CLOCK_MONOTONIC when that flush began */
    __u64 dropped;       /* records CUPTI dropped so far (buffers not supplied in time) */
    __u64 flushes;       /* flushed probes seen */
    __s64 status;        /* last status probe: DEV_AGENT_* */
    __u64 active_ns;     /* bpf_ktime_get_ns() (CLOCK_MONOTONIC) of the last DEV_AGENT_ACTIVE status */
    __u64 idle_ns;       /* ... and of the last DEV_AGENT_IDLE */
    __u64 unfinished;    /* records a forced flush handed over without times (work still running at a stop) */
};

/* The device work the records seen since user space last took it span (per CPU; kernels, copies and sets):
 * what a duty cycle's attached share recorded, on the records' clock (CLOCK_MONOTONIC). A record that
 * started before the share did (dev_config.share_from_ns: work of an earlier share whose record came late)
 * is counted apart and widens nothing. */
struct dev_span {
    __u64 first_start_ns;  /* 0: no record yet */
    __u64 last_end_ns;
    __u64 records;
    __u64 device_ns;       /* the records' own time (end - start), summed */
    __u64 stale;           /* records that started before the share */
    __u64 stale_ns;
};

/* Agent states and failures (status probe, deepctx_agent_state, deepctx_agent_attach()'s value). */
#define DEV_AGENT_OK 0              /* attach: started (deepctx_agent_state: not started yet) */
#define DEV_AGENT_ACTIVE 1          /* subscribed, activity enabled (a watcher appeared) */
#define DEV_AGENT_IDLE 2            /* nobody watches: activity disabled, CUPTI released */
#define DEV_AGENT_E_NO_CUDA (-1)    /* libcuda not loaded or no CUDA context yet */
#define DEV_AGENT_E_NO_CUPTI (-2)   /* libcupti could not be loaded */
#define DEV_AGENT_E_BUSY (-3)       /* CUPTI is held by another profiler (one subscriber at a time) */
#define DEV_AGENT_E_CUPTI (-4)      /* a CUPTI call failed */
#define DEV_AGENT_E_PENDING (-5)    /* attach: still starting when the borrowed thread stopped waiting */

/* Per-capture settings, written by user space into dev_config[0]. */
struct dev_config {
    __u64 start_ns;      /* records that ended before this belong to an earlier window */
    __u32 trace;         /* emit per-call and per-record events */
    __u32 agent_calls;   /* launches and async copies/sets are the agent's alone (no uprobe parks them):
                            a correlation never joins another call of the thread */
    __u32 spans;         /* a duty cycle runs: records widen dev_span (what each attached share recorded) */
    __u32 cont_slot;     /* the process's gpu_ranges slot: unprobed calls' walks lost above a GEMM library's frames
                            go on by .eh_frame (on_dev_correlation_walk); GPU_NO_CONTINUE: none */
    __u64 share_from_ns; /* when the current share's probes were attached (0: the capture's first share) */
};

/* USDT argument locations of one probe site (probes/usdt.py fills them from the file's
 * .note.stapsdt; device_activity.bpf.c decodes them), keyed by (pid, site address). */
#define USDT_MAX_ARGS 4
#define USDT_ARG_NONE 0
#define USDT_ARG_REG 1     /* the value is in a register */
#define USDT_ARG_MEM 2     /* at register + offset */
#define USDT_ARG_CONST 3   /* a constant */
struct usdt_site {
    __u8 nargs;
    __u8 pad[7];
    __u8 kind[USDT_MAX_ARGS];
    __u8 size[USDT_MAX_ARGS];
    __u8 is_signed[USDT_MAX_ARGS];
    __u8 reg[USDT_MAX_ARGS];   /* probes/usdt.py REGISTERS: ax bx cx dx si di bp sp r8..r15 */
    __s32 offset[USDT_MAX_ARGS];
    __s64 value[USDT_MAX_ARGS];
};
struct usdt_site_key {
    __u32 pid;
    __u32 pad;
    __u64 addr;           /* the site's address in the process */
};

enum dev_stat {
    DEV_STAT_CORRELATIONS = 0,  /* correlation probes of the target */
    DEV_STAT_UNPROBED,          /* ... whose call the GPU API probes had not parked (path taken there) */
    DEV_STAT_CORR_FULL,         /* a young call's slot or id entry taken again before a record joined it */
    DEV_STAT_BATCHES,
    DEV_STAT_RECORDS,           /* records read */
    DEV_STAT_UNKNOWN,           /* records whose correlation id was not known: counted, kept apart */
    DEV_STAT_BEFORE,            /* records that ended before the capture started (not counted) */
    DEV_STAT_MAP_FULL,          /* aggregation map full: record dropped */
    DEV_STAT_NAMES,             /* kernel names copied */
    DEV_STAT_TRACE_LOST,        /* trace events the ring buffer had no room for */
    DEV_STAT_BATCH_CUT,         /* batches longer than DEV_BATCH (rest not read) */
    DEV_STAT_TIME_NS,           /* total device time of the records counted */
    DEV_STAT_SAMPLED,           /* records charged through a sampled call (sampled captures) */
    DEV_STAT_GRAPH_NODES,       /* graph nodes made or cloned whose making call's path is kept */
    DEV_STAT_GRAPH_NODES_UNKNOWN, /* ... made in a call not announced (or cloned from such a node) */
    DEV_STAT_GRAPH_PLACED,      /* graph launches' records placed under the path that made their node */
    DEV_STAT_GRAPH_UNPLACED,    /* ... whose node's making path is not known: under the launch only */
    DEV_STAT__COUNT,
};

#endif
