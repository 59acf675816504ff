/* The part of the deepctx device-activity agents that does not depend on the SDK (agent_common.h). */
#define _GNU_SOURCE
#include "agent_common.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SEMAPHORE(name) \
    __extension__ unsigned short deepctx_##name##_semaphore __attribute__((unused, section(".probes")))
SEMAPHORE(correlation);
SEMAPHORE(api_exit);
SEMAPHORE(batch);
SEMAPHORE(flushed);
SEMAPHORE(status);
SEMAPHORE(flush_request);
SEMAPHORE(sampling);
SEMAPHORE(stop_request);
SEMAPHORE(graph_node);

EXPORT volatile int deepctx_agent_state = 0;
EXPORT char deepctx_agent_error[256];

pthread_mutex_t agent_lock = PTHREAD_MUTEX_INITIALIZER;  /* state changes and flushes */
int agent_initialized;
int agent_active;
size_t agent_buffer_bytes = 4096 * 1024;
uint64_t agent_flush_period_ns = 200 * 1000000ull;
uint64_t agent_dropped_records;
uint64_t agent_unfinished_records;
uint64_t agent_sample_interval_ns = 500 * 1000ull;

/* Which announced call stands for each call (sampled captures): slot corr % SAMPLE_SLOTS holds
 * corr << 32 | the announced call's id. A slot is rewritten every SAMPLE_SLOTS calls: records must be
 * handed over before that (the periodic flush: 200 ms, i.e. up to 1.3M calls a second). 2 MiB of
 * address space, touched only by sampled captures. */
#define SAMPLE_SLOTS (1u << 18)
static uint64_t *sample_slots;
/* How long each call ran (exact captures), the same way: corr << 32 | nanoseconds (at most ~4.3 s). */
static uint64_t *api_slots;
static __thread uint64_t api_enter_ns[2];  /* this thread's outer call and a call nested in it, if timed */
static __thread uint64_t sample_next_ns;  /* this thread's next announcement is due then */
static __thread uint32_t sample_current;   /* the id of this thread's last announced call */
static __thread uint64_t sample_rng;

static const struct agent_ops *ops;
static int exiting;
static uint64_t flush_sequence;
/* Stopped on the daemon's stop request while its probes are still there: it stays stopped until they go
 * (the daemon closes the request's link with the others, in no set order). */
static int held;

/* Is recording wanted: a watcher is there (the batch probe) and has not asked the agent to stop? */
static int wanted(void) { return agent_watched() && !held && !WATCHED(stop_request); }

uint64_t agent_monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int agent_clock_offset(int (*read)(uint64_t *), int64_t *offset) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t sdk_ns = 0;
        uint64_t before = agent_monotonic_ns();
        if (read(&sdk_ns) != 0 || !sdk_ns)
            return -1;
        uint64_t after = agent_monotonic_ns();
        if (after - before < best) {
            best = after - before;
            *offset = (int64_t)sdk_ns - (int64_t)(before + (after - before) / 2);
        }
    }
    return 0;
}

uint64_t agent_realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t agent_env_u64(const char *name, uint64_t fallback) {
    const char *s = getenv(name);
    if (!s || !*s)
        return fallback;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    return (end && *end == 0) ? (uint64_t)v : fallback;
}

int agent_timing;

void agent_set_error(int code, const char *fmt, const char *detail) {
    snprintf(deepctx_agent_error, sizeof(deepctx_agent_error), fmt, detail ? detail : "");
    deepctx_agent_state = code;
    if (agent_timing)  /* with the steps' times: where a start that never reports ended, and why */
        fprintf(stderr, "deepctx agent [%d]: error %d: %s\n", (int)getpid(), code, deepctx_agent_error);
}

int agent_bind(void *h, const struct agent_sym *syms, size_t n, const char *missing_fmt) {
    for (size_t i = 0; i < n; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (syms[i].required && !*syms[i].slot) {
            agent_set_error(DEV_AGENT_E_NO_CUPTI, missing_fmt, syms[i].name);
            return DEV_AGENT_E_NO_CUPTI;
        }
    }
    return DEV_AGENT_OK;
}

void agent_report_status(int64_t code) {
    if (WATCHED(status))
        STAP_PROBE1(deepctx, status, code);
}

/* The batch probe: records completed while nobody can take them would be lost without a count. deepctxd
 * attaches it after every other probe, so an agent that starts on it starts with all of them there. */
int agent_watched(void) { return WATCHED(batch); }

static void sample_note(uint32_t corr);

void agent_sample_nested(uint32_t corr) { sample_note(corr); }

int agent_sample_due(uint32_t corr) {
    uint64_t now = agent_monotonic_ns();
    int due = now >= sample_next_ns;
    if (due) {
        /* next in [interval / 2, 3 * interval / 2): xorshift, seeded by the thread's first id */
        if (!sample_rng)
            sample_rng = 0x9e3779b97f4a7c15ull ^ corr;
        sample_rng ^= sample_rng << 13;
        sample_rng ^= sample_rng >> 7;
        sample_rng ^= sample_rng << 17;
        uint64_t half = agent_sample_interval_ns / 2;
        sample_next_ns = now + half + (agent_sample_interval_ns ? sample_rng % agent_sample_interval_ns : 0);
        sample_current = corr;
    }
    sample_note(corr);
    return due;
}

int agent_announced(uint32_t corr) {
    if (!WATCHED(correlation))
        return 0;
    return !WATCHED(sampling) || sample_current == corr;
}

/* slot corr % SAMPLE_SLOTS of *table := corr << 32 | value; the table made at its first use (a racing
 * thread's copy is freed). */
static void slot_put(uint64_t **table, uint32_t corr, uint32_t value) {
    uint64_t *slots = __atomic_load_n(table, __ATOMIC_ACQUIRE);
    if (!slots) {
        uint64_t *fresh = calloc(SAMPLE_SLOTS, sizeof(uint64_t));
        uint64_t *expected = NULL;
        if (fresh && !__atomic_compare_exchange_n(table, &expected, fresh, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            free(fresh);
        slots = __atomic_load_n(table, __ATOMIC_ACQUIRE);
    }
    if (slots)
        __atomic_store_n(&slots[corr % SAMPLE_SLOTS], ((uint64_t)corr << 32) | value, __ATOMIC_RELAXED);
}

/* The value slot_put() left for corr, 0 when none (or overwritten since). */
static uint32_t slot_get(uint64_t **table, uint32_t corr) {
    uint64_t *slots = __atomic_load_n(table, __ATOMIC_ACQUIRE);
    if (!slots || !corr)
        return 0;
    uint64_t v = __atomic_load_n(&slots[corr % SAMPLE_SLOTS], __ATOMIC_RELAXED);
    return (uint32_t)(v >> 32) == corr ? (uint32_t)v : 0;
}

/* corr's records go to this thread's last announced call. */
static void sample_note(uint32_t corr) {
    if (sample_current)  /* else nothing announced on this thread yet */
        slot_put(&sample_slots, corr, sample_current);
}

void agent_api_enter(int nested) { api_enter_ns[nested != 0] = agent_monotonic_ns(); }

void agent_api_exit(int nested, uint32_t corr) {
    uint64_t *enter = &api_enter_ns[nested != 0];
    if (!*enter)
        return;  /* entered before timing began */
    uint64_t ns = agent_monotonic_ns() - *enter;
    *enter = 0;
    slot_put(&api_slots, corr, ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns);
}

void agent_fire_batch(struct dev_record *records, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        records[i].sample = slot_get(&sample_slots, records[i].correlation);
        if (records[i].sample)
            records[i].flags |= DEV_REC_F_SAMPLED;
        records[i].api_ns = slot_get(&api_slots, records[i].correlation);
    }
    STAP_PROBE2(deepctx, batch, records, n);
}

void agent_timed(const char *what, uint64_t *t) {
    if (!agent_timing)
        return;
    uint64_t now = agent_monotonic_ns();
    fprintf(stderr, "deepctx agent [%d] at %.3f s: %s %.3f ms\n", (int)getpid(), (double)now / 1e9, what,
            (double)(now - *t) / 1e6);
    *t = now;
}

void agent_read_settings(void) {
    agent_timing = (int)agent_env_u64("DEEPCTX_AGENT_TIMING", 0);
    agent_buffer_bytes = agent_env_u64("DEEPCTX_BUFFER_KB", 4096) * 1024;
    if (agent_buffer_bytes < 64 * 1024)
        agent_buffer_bytes = 64 * 1024;
    agent_flush_period_ns = agent_env_u64("DEEPCTX_FLUSH_MS", 200) * 1000000ull;
    agent_sample_interval_ns = agent_env_u64("DEEPCTX_SAMPLE_US", 500) * 1000ull;
}

/* Delivers the SDK's buffers (completed records only, or everything when forced), then says so; the
 * flushed probe's started_ns is `since` (0: now), what the records handed over are complete up to. */
static void flush_since(int forced, uint64_t since) {
    uint64_t started = since ? since : agent_monotonic_ns();
    if (ops->flush(forced) != 0)
        return;
    uint64_t seq = ++flush_sequence;
    uint64_t dropped = __atomic_load_n(&agent_dropped_records, __ATOMIC_RELAXED);
    uint64_t unfinished = __atomic_load_n(&agent_unfinished_records, __ATOMIC_RELAXED);
    if (WATCHED(flushed))
        STAP_PROBE4(deepctx, flushed, seq, started, dropped, unfinished);
}

void agent_flush(int forced) { flush_since(forced, 0); }

int agent_start_activity(void) {
    if (WATCHED(sampling))
        STAP_PROBE(deepctx, sampling);  /* a site for the semaphore, which is what the daemon raises */
    int rc = ops->start();
    if (rc != DEV_AGENT_OK)
        return rc;
    agent_active = 1;
    deepctx_agent_state = DEV_AGENT_ACTIVE;
    agent_report_status(DEV_AGENT_ACTIVE);
    return DEV_AGENT_OK;
}

/* Stops collecting, then hands over every record: CUPTI's flush that is not forced keeps back a whole buffer
 * while any record in it is of unfinished work, and those records would be lost with the probes. The
 * flush's instant is the stop's: every record of work that ran before it is handed over (work launched
 * before it and unfinished has no times: counted in agent_unfinished_records). */
void agent_stop_activity(void) {
    uint64_t t = agent_monotonic_ns();
    uint64_t stopped = t;
    ops->stop();
    agent_timed("stop: activity off", &t);
    flush_since(1, stopped);
    agent_timed("stop: forced flush", &t);
    if (ops->release)
        ops->release();
    agent_timed("stop: released", &t);
    agent_active = 0;
    deepctx_agent_state = DEV_AGENT_IDLE;
    agent_report_status(DEV_AGENT_IDLE);
}

/* Follows the semaphores: starts when a watcher appears, stops when the last one leaves, flushes
 * periodically and whenever the flush_request semaphore is raised. */
static void *watcher(void *arg) {
    (void)arg;
    uint64_t last_flush = agent_monotonic_ns();
    int failed = 0;  /* start failed for this watcher: do not retry until it leaves */
    for (;;) {
        int w = agent_watched();
        pthread_mutex_lock(&agent_lock);
        if (exiting) {
            pthread_mutex_unlock(&agent_lock);
            return NULL;
        }
        /* The daemon's stop request (its semaphore): stop and hand everything over while the batch probe
         * is still there to take it; the daemon waits for the idle status, then lets the probes go. */
        int stop = w && WATCHED(stop_request);
        held = w && (held || stop);
        int want = w && !held;
        if (want && !agent_active && !failed) {
            int rc = agent_start_activity();
            if (rc != DEV_AGENT_OK) {
                failed = 1;
                agent_report_status(rc);
            }
        } else if (!want && agent_active) {
            agent_stop_activity();
        } else if (stop && !failed) {
            agent_report_status(DEV_AGENT_IDLE);  /* nothing to hand over: say so, the daemon waits for it */
        } else if (!w && ops->release) {
            ops->release();
        }
        if (stop)
            STAP_PROBE(deepctx, stop_request);  /* the note the daemon's request attaches to */
        if (!w)
            failed = 0;
        uint64_t now = agent_monotonic_ns();
        int requested = WATCHED(flush_request);
        if (agent_active && (requested || now - last_flush >= agent_flush_period_ns)) {
            agent_flush(0);
            last_flush = now;
            if (requested)
                STAP_PROBE(deepctx, flush_request);  /* the note the daemon's request attaches to */
        }
        pthread_mutex_unlock(&agent_lock);
        struct timespec tick = {0, (agent_active ? 10 : 100) * 1000000L};
        nanosleep(&tick, NULL);
    }
}

void agent_at_exit(void) {
    pthread_mutex_lock(&agent_lock);
    exiting = 1;
    if (agent_active)  /* the last records, before the process is gone */
        agent_flush(1);
    pthread_mutex_unlock(&agent_lock);
}

int agent_start_watching(const struct agent_ops *agent_ops) {
    ops = agent_ops;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &attr, watcher, NULL);
    pthread_attr_destroy(&attr);
    if (err) {
        agent_set_error(DEV_AGENT_E_CUPTI, "cannot start the agent's thread: %s", strerror(err));
        return DEV_AGENT_E_CUPTI;
    }
    pthread_setname_np(t, ops->thread_name);
    atexit(agent_at_exit);
    agent_initialized = 1;
    deepctx_agent_state = DEV_AGENT_IDLE;
    if (wanted()) {  /* a watcher is already there (`deepctx run`, attach): from the first call */
        int rc = agent_start_activity();
        if (rc != DEV_AGENT_OK)
            agent_report_status(rc);
    } else if (ops->release) {
        ops->release();
    }
    return DEV_AGENT_OK;
}

/* `deepctx run`: tell the CLI this process has started the GPU runtime, then wait (bounded) until it says
 * the daemon watches, so that device activity is exact from the first kernel. The CLI's socket is a
 * SOCK_SEQPACKET; each process sends its pid and one end of a private socket pair, and waits for one
 * byte on the other end. */
void agent_notify_and_wait(void) {
    const char *fd_s = getenv("DEEPCTX_NOTIFY_FD");
    if (!fd_s || !*fd_s)
        return;
    int fd = atoi(fd_s);
    uint64_t wait_ms = agent_env_u64("DEEPCTX_AGENT_WAIT_MS", 60000);
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
        for (uint64_t waited = 0; waited < wait_ms && !agent_watched(); waited += 10) {
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

void agent_start_if_watched(void) {
    pthread_mutex_lock(&agent_lock);
    if (agent_initialized && wanted() && !agent_active) {
        int r = agent_start_activity();
        if (r != DEV_AGENT_OK)
            agent_report_status(r);
    }
    pthread_mutex_unlock(&agent_lock);
}

/* Attach time. deepctxd calls deepctx_agent_attach() after dlopen, in a thread of the target it
 * borrowed through ptrace; that thread may hold locks that the GPU runtime or its profiling SDK take, so
 * the work runs in a thread of its own and the borrowed one waits for it at most DEEPCTX_ATTACH_WAIT_MS
 * (default 5000). DEV_AGENT_E_PENDING when the start outlasted the wait (deepctx_agent_state then tells
 * the outcome when it comes). */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t attach_done = PTHREAD_COND_INITIALIZER;
static int attach_started;
static int attach_finished;
static int attach_result;
static int (*attach_init)(void);

static void *attach_worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&agent_lock);
    int rc = attach_init();
    pthread_mutex_unlock(&agent_lock);
    if (rc != DEV_AGENT_OK)
        deepctx_agent_state = rc;
    pthread_mutex_lock(&attach_lock);
    attach_result = rc;
    attach_finished = 1;
    pthread_cond_broadcast(&attach_done);
    pthread_mutex_unlock(&attach_lock);
    return NULL;
}

int agent_attach(int (*init)(void)) {
    pthread_mutex_lock(&attach_lock);
    if (!attach_started) {
        attach_init = init;
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &attr, attach_worker, NULL);
        pthread_attr_destroy(&attr);
        if (err) {
            pthread_mutex_unlock(&attach_lock);
            agent_set_error(DEV_AGENT_E_CUPTI, "cannot start the agent's thread: %s", strerror(err));
            return DEV_AGENT_E_CUPTI;
        }
        attach_started = 1;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    uint64_t wait_ms = agent_env_u64("DEEPCTX_ATTACH_WAIT_MS", 5000);
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
