/* What the deepctx device-activity agents have in common (native/agent_common.c): the USDT probes of
 * provider "deepctx" and their semaphores (probes/device_activity.h describes each probe), the state
 * the injector reads, the watcher thread that starts and stops reporting as deepctxd's probes come and
 * go, periodic and requested flushes, the `deepctx run` handshake, and the attach-time start.
 *
 * Each agent (deepctx_cupti.c for CUPTI, deepctx_rocprof.c for rocprofiler-sdk) only says how to start,
 * stop and flush its SDK (struct agent_ops) and turns the SDK's records into struct dev_record; the
 * logic of when to do what lives here, once. Everything here is called with agent_lock held unless it
 * says otherwise. */
#ifndef DEEPCTX_AGENT_COMMON_H
#define DEEPCTX_AGENT_COMMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

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

/* USDT semaphores (agent_common.c): the kernel adds one per attached probe (uprobe ref_ctr_offset). */
extern unsigned short deepctx_correlation_semaphore, deepctx_api_exit_semaphore, deepctx_batch_semaphore,
    deepctx_flushed_semaphore, deepctx_status_semaphore, deepctx_flush_request_semaphore, deepctx_sampling_semaphore,
    deepctx_stop_request_semaphore, deepctx_graph_node_semaphore;
#define WATCHED(name) __builtin_expect(__atomic_load_n(&deepctx_##name##_semaphore, __ATOMIC_RELAXED) != 0, 0)

/* Sampled captures (the daemon raised the sampling semaphore): is this call one the correlation probe
 * announces? Each thread announces its first call after every interval (DEEPCTX_SAMPLE_US, jittered so
 * that it does not beat with a loop's period); every call notes which announced call stands for it, and
 * agent_fire_batch() writes that into its records (dev_record.sample). */
int agent_sample_due(uint32_t corr);
/* Was call corr, in progress on this thread, announced by the correlation probe (every call in exact captures,
 * the thread's sampled one in sampled captures)? */
int agent_announced(uint32_t corr);
/* A call made inside one this thread announced or noted (a driver call of a runtime call, under an id
 * of its own): never announced when sampling, its records follow the outer call's. */
void agent_sample_nested(uint32_t corr);

/* Exact captures (correlation watched, sampling not): how long each reported call runs, enter to exit of
 * its callbacks, measured here (two clock reads) and handed over in its records (dev_record.api_ns), so a
 * call left to the agent has the API time a uprobe's return probe would have measured. nested: a call
 * made inside another reported call of this thread (the runtime's driver call under an id of its own). */
void agent_api_enter(int nested);
void agent_api_exit(int nested, uint32_t corr);
#define AGENT_TIMED() (WATCHED(correlation) && !WATCHED(sampling))

/* The per-call probes, expanded at the call site (the hot path: one load and a branch when unwatched).
 * nested: the call runs inside another reported call of this thread. */
#define AGENT_CORRELATION(corr, api, fn, nested)                                                \
    do {                                                                                        \
        if (WATCHED(correlation)) {                                                             \
            if (!WATCHED(sampling))                                                             \
                STAP_PROBE3(deepctx, correlation, (corr), (api), (fn));                         \
            else if (nested)                                                                    \
                agent_sample_nested(corr);                                                      \
            else if (agent_sample_due(corr))                                                    \
                STAP_PROBE3(deepctx, correlation, (corr), (api), (fn));                         \
        }                                                                                       \
    } while (0)
#define AGENT_API_EXIT(corr)                                            \
    do {                                                                \
        if (WATCHED(api_exit))                                          \
            STAP_PROBE1(deepctx, api_exit, (corr));                     \
    } while (0)

/* A CUDA graph node made inside announced call `corr` (original 0), or cloned from node `original` (corr 0). */
#define AGENT_GRAPH_NODE(node, original, corr)                                      \
    do {                                                                            \
        if (WATCHED(graph_node))                                                    \
            STAP_PROBE3(deepctx, graph_node, (node), (original), (corr));           \
    } while (0)

/* What the injector and tests can read in the target: DEV_AGENT_* and a sentence. */
extern volatile int deepctx_agent_state;
extern char deepctx_agent_error[256];

/* How one agent drives its SDK. Called with agent_lock held. */
struct agent_ops {
    const char *thread_name;   /* the watcher thread's name */
    int (*start)(void);        /* start reporting: DEV_AGENT_OK, or DEV_AGENT_E_* with agent_set_error() */
    void (*stop)(void);        /* stop collecting new activity (the final flush follows) */
    void (*release)(void);     /* nobody watches and nothing is active: let the SDK go (may be NULL) */
    int (*flush)(int forced);  /* hand over completed records (forced: everything): 0 when it did */
};

extern pthread_mutex_t agent_lock;
extern int agent_initialized;
extern int agent_active;
extern size_t agent_buffer_bytes;        /* DEEPCTX_BUFFER_KB, at least 64 KiB (default 4 MiB) */
extern uint64_t agent_flush_period_ns;   /* DEEPCTX_FLUSH_MS (default 200 ms) */
extern uint64_t agent_dropped_records;   /* records the SDK dropped (atomic) */
extern uint64_t agent_unfinished_records;  /* records a forced flush handed over without times (atomic) */
extern uint64_t agent_sample_interval_ns;  /* DEEPCTX_SAMPLE_US (default 500 us per thread) */

uint64_t agent_monotonic_ns(void);
/* An SDK's clock - CLOCK_MONOTONIC: `read` (0 on success) between two CLOCK_MONOTONIC readings, the
 * narrowest of a few tries (a thread preempted between them would be microseconds off). 0 on success. */
int agent_clock_offset(int (*read)(uint64_t *), int64_t *offset);
uint64_t agent_realtime_ns(void);
uint64_t agent_env_u64(const char *name, uint64_t fallback);
void agent_set_error(int code, const char *fmt, const char *detail);

/* One SDK function an agent looks up in the library it opened (AGENT_SYM(table, field, "name", required)). */
struct agent_sym {
    void **slot;
    const char *name;
    int required;
};
#define AGENT_SYM(table, field, sym_name, is_required) {(void **)&(table).field, (sym_name), (is_required)}
/* Looks up each of syms in the library h: an optional one missing is left NULL; a required one missing
 * sets the error (missing_fmt names it with %s) and returns DEV_AGENT_E_NO_CUPTI. DEV_AGENT_OK otherwise. */
int agent_bind(void *h, const struct agent_sym *syms, size_t n, const char *missing_fmt);
void agent_report_status(int64_t code);
int agent_watched(void);                 /* is the batch probe attached? (no lock needed) */
/* Fills in each record's sample (sampled captures), then fires the batch probe. Any thread, no lock. */
void agent_fire_batch(struct dev_record *records, uint32_t n);

/* DEEPCTX_AGENT_TIMING=1 (a diagnostic): how long each step of starting and stopping the SDK took, on
 * stderr. agent_timed() prints `what` with the time since *t and moves *t on; no-op when off. */
extern int agent_timing;
void agent_timed(const char *what, uint64_t *t);

/* Reads DEEPCTX_BUFFER_KB, DEEPCTX_FLUSH_MS, DEEPCTX_SAMPLE_US and DEEPCTX_AGENT_TIMING. */
void agent_read_settings(void);
/* The common start, once the SDK is loaded and set up: the watcher thread, the exit flush; starts at
 * once when a watcher is already there, else releases the SDK. */
int agent_start_watching(const struct agent_ops *ops);
/* Starts reporting (ops->start), then says so: state ACTIVE, status probe. */
int agent_start_activity(void);
/* Everything handed over, then idle: ops->stop, forced flush, ops->release, status IDLE. */
void agent_stop_activity(void);
/* ops->flush, then the flushed probe with its sequence number, start time and drop count. */
void agent_flush(int forced);
/* The exit flush (atexit, or an SDK's finalize callback). Takes agent_lock. */
void agent_at_exit(void);
/* `deepctx run`: tell the CLI this process has started, wait (bounded) until deepctxd watches. No lock. */
void agent_notify_and_wait(void);
/* After agent_notify_and_wait(): start now if a watcher came. Takes agent_lock. */
void agent_start_if_watched(void);
/* deepctx_agent_attach()'s logic: runs init (under agent_lock) in a thread of its own and waits for it at
 * most DEEPCTX_ATTACH_WAIT_MS; DEV_AGENT_OK, DEV_AGENT_E_*, or DEV_AGENT_E_PENDING. No lock. */
int agent_attach(int (*init)(void));

#endif
