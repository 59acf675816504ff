/* Device activity: the join of the CUPTI agent's reports with the GPU API probes' call paths.
 * Composed after gpu_api.bpf.c (uses gpu_inflight, gpu_stacks and, when present, the Python walker and
 * the native unwinder).
 *   correlation probe: correlation id -> the call path key of the API call in flight on this thread
 *                      (gpu_inflight, parked by the API entry probe), else one taken here;
 *   batch probe:       per record, GPU time, count and bytes per (call path, kernel name / copy kind,
 *                      device) in dev_counts; records whose id is unknown are kept apart and counted;
 *   flushed / status:  the agent's last flush and state, for user space (dev_flush);
 *   api_exit probe:    trace mode only, like per-record events (ring buffer dev_events).
 * USDT arguments are decoded from dev_sites (probes/usdt.py), keyed by the site's address.
 * Settings (-D): DEV_CORR_ENTRIES, DEV_CORR_IDS, DEV_COUNT_ENTRIES, DEV_COUNT_SPARE, DEV_COUNT_FLAGS,
 * DEV_NAME_ENTRIES, DEV_SITE_ENTRIES, DEV_RINGBUF_PAGES: the daemon's sizes; trace mode and the rest of a
 * capture's settings are in dev_config, so one loaded program serves every capture. */
#include <uapi/linux/ptrace.h>
#include "device_activity.h"
#include "counts_map.bpf.h"

BPF_HASH(dev_sites, struct usdt_site_key, struct usdt_site, DEV_SITE_ENTRIES);
/* The join table's two rings (struct dev_corr_slot): calls whose ids get no record (a failed launch, a
 * driver id under a runtime id) are overwritten in turn. DEV_CORR_ENTRIES, DEV_CORR_IDS: powers of two. */
BPF_ARRAY(dev_corr, struct dev_corr_slot, DEV_CORR_ENTRIES);
BPF_ARRAY(dev_corr_ids, __u64, DEV_CORR_IDS);
BPF_ARRAY(dev_corr_next, __u64, 1); /* calls reported so far: the next one's slot */
COUNTS_MAP(dev_counts, struct dev_key, struct dev_val, DEV_COUNT_ENTRIES, DEV_COUNT_SPARE,
           DEV_COUNT_FLAGS);
BPF_F_TABLE("hash", struct dev_name_key, struct dev_name, dev_names, DEV_NAME_ENTRIES, BPF_F_NO_PREALLOC);
#ifndef DEV_GRAPH_NODE_ENTRIES
#define DEV_GRAPH_NODE_ENTRIES 65536
#endif
/* graph node -> the key of the call that made it (struct dev_graph_key); the oldest go first */
BPF_TABLE("lru_hash", struct dev_graph_key, struct gpu_key, dev_graph_nodes, DEV_GRAPH_NODE_ENTRIES);
BPF_PERCPU_ARRAY(dev_stats, __u64, DEV_STAT__COUNT);
BPF_ARRAY(dev_config, struct dev_config, 1);
BPF_ARRAY(dev_flush, struct dev_flush, 1);
BPF_PERCPU_ARRAY(dev_span, struct dev_span, 1);
BPF_PERCPU_ARRAY(dev_corr_scratch, struct dev_corr, 1);
BPF_PERCPU_ARRAY(dev_key_scratch, struct dev_key, 1);
BPF_PERCPU_ARRAY(dev_name_scratch, struct dev_name, 1);
/* A correlation's call path with the .eh_frame continuation (GEMM libraries' calls) is taken in a program of its
 * own, on_dev_correlation_walk, by tail call: inlined, it took on_dev_correlation past its 512-byte stack. The
 * call's id goes over in dev_walk_corr (the rest in dev_corr_scratch). */
BPF_PROG_ARRAY(dev_walk, 1);
BPF_PERCPU_ARRAY(dev_walk_corr, __u32, 1);
/* trace mode's events: always there, written only while dev_config.trace says so (one program serves
 * traced and untraced captures) */
BPF_RINGBUF_OUTPUT(dev_events, DEV_RINGBUF_PAGES);

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
static __always_inline void dev_stat_add(int idx, __u64 n) {
    __u64 *v = dev_stats.lookup(&idx);
    if (v)
        *v += n;
}
#endif

/* --- USDT arguments ------------------------------------------------------------------------------ */

/* The general registers, copied once per probe hit: reading ctx at an offset computed from the
 * register number is what the verifier refuses, an index into a stack array it accepts. */
struct usdt_regs {
    __u64 r[16];  /* probes/usdt.py REGISTERS order */
};

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
static __always_inline void usdt_load(struct pt_regs *ctx, struct usdt_regs *u) {
    u->r[0] = ctx->ax;
    u->r[1] = ctx->bx;
    u->r[2] = ctx->cx;
    u->r[3] = ctx->dx;
    u->r[4] = ctx->si;
    u->r[5] = ctx->di;
    u->r[6] = ctx->bp;
    u->r[7] = ctx->sp;
    u->r[8] = ctx->r8;
    u->r[9] = ctx->r9;
    u->r[10] = ctx->r10;
    u->r[11] = ctx->r11;
    u->r[12] = ctx->r12;
    u->r[13] = ctx->r13;
    u->r[14] = ctx->r14;
    u->r[15] = ctx->r15;
    asm volatile("" ::: "memory");
}

/* Few branches on purpose: every path through here multiplies the states the verifier walks in the
 * handlers' loops. Memory operands are read as 8 bytes, then cut to their size. */
static __always_inline __u64 usdt_arg(struct usdt_regs *u, struct usdt_site *s, int i) {
    __u8 kind = s->kind[i];
    __u64 v = kind == USDT_ARG_CONST ? (__u64)s->value[i] : u->r[s->reg[i] & 15];
    if (kind == USDT_ARG_MEM) {
        __u64 addr = v + (__s64)s->offset[i];
        v = 0;
        bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    }
    __u32 shift = (64 - 8 * (__u32)s->size[i]) & 63;  /* registers hold more than the operand */
    if (s->is_signed[i])
        return (__u64)(((__s64)(v << shift)) >> shift);
    return (v << shift) >> shift;
}

static __always_inline struct usdt_site *dev_site(struct pt_regs *ctx, __u32 pid) {
    struct usdt_site_key k = {};
    k.pid = pid;
    k.addr = PT_REGS_IP(ctx);
    return dev_sites.lookup(&k);
}
#endif

/* How a USDT probe's program opens: the site that fired for process `pid` (or it returns: a process the
 * capture does not watch) and the registers usdt_arg reads. */
#define DEV_USDT_OPEN(ctx, pid, s, u)             \
    struct usdt_site *s = dev_site(ctx, pid);     \
    if (!s)                                       \
        return 0;                                 \
    struct usdt_regs u;                           \
    usdt_load(ctx, &u)

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
static __always_inline void dev_learn_name(__u32 pid, __u64 addr) {
    struct dev_name_key nk = {};
    nk.pid = pid;
    nk.addr = addr;
    if (!addr || dev_names.lookup(&nk))
        return;
    int zero = 0;
    struct dev_name *n = dev_name_scratch.lookup(&zero);
    if (!n)
        return;
    /* A string on a page the process never touched is not resident yet and reads as nothing: try
     * again next time (user space reads what is still missing from the live process). */
    if (bpf_probe_read_user_str(n->name, sizeof(n->name), (void *)addr) > 1 && dev_names.update(&nk, n) == 0)
        dev_stat_add(DEV_STAT_NAMES, 1);
}

/* --- correlation: id -> call path ----------------------------------------------------------------- */

/* The slot of the call correlation id `corr` of process `pid` came from, or NULL. */
static __always_inline struct dev_corr_slot *dev_corr_slot_of(__u32 pid, __u32 corr) {
    __u32 i = corr & (DEV_CORR_IDS - 1);
    __u64 *v = dev_corr_ids.lookup(&i);
    if (!v || (__u32)(*v >> 32) != corr)
        return NULL;
    __u32 j = (__u32)*v & (DEV_CORR_ENTRIES - 1);
    struct dev_corr_slot *s = dev_corr.lookup(&j);
    return s && s->key.pid == pid && s->key.correlation == corr ? s : NULL;
}

static __always_inline struct dev_corr *dev_corr_find(__u32 pid, __u32 corr) {
    struct dev_corr_slot *s = dev_corr_slot_of(pid, corr);
    return s ? &s->corr : NULL;
}

/* A call that is young and was never joined may still get records: taking its place drops it. */
static __always_inline int dev_corr_live(struct dev_corr_slot *s, __u64 now) {
    return s->key.pid && !s->corr.joined && now - s->corr.api_start_ns < DEV_CORR_YOUNG_NS;
}

#if defined(GPU_FP_CONTINUE) && defined(DEEPCTX_NATIVE_UNWIND)
#define DEV_WALK_CONTINUED 1  /* on_dev_correlation_walk is compiled in (device_activity.py: continued) */
#endif

/* A correlation's call the GPU API probes do not track (or sampled mode's entry-only calls): its call path, taken
 * as the API probes take theirs, into the scratch's call. Nothing the caller decided with is used after the walks:
 * the settings are looked up again, so that every way here reaches the walks in one verifier state (the caller's
 * branches each made one, and the walks were verified once for each: 669K of the verifier's 1M instructions).
 * slot: the process's in gpu_ranges where a walk lost above a GEMM library's frames goes on by .eh_frame (only in
 * on_dev_correlation_walk, whose stack is its own), else GPU_NO_CONTINUE. */
static __always_inline void dev_unprobed_path(struct pt_regs *ctx, __u32 pid, __u32 tid, __u32 corr, __u32 slot) {
    int zero = 0;
    struct dev_corr *c = dev_corr_scratch.lookup(&zero);
    if (!c)
        return;
    gpu_capture_path(ctx, 0, slot, 1, pid, tid, &c->call.user_stack, &c->call.py_stack);
    c = dev_corr_scratch.lookup(&zero);
    struct dev_config *cfg = dev_config.lookup(&zero);
    if (!c || !cfg)
        return;
    if (c->call.user_stack == 0)
        c->call.flags |= GPU_KEY_F_STACK_LOST;
    int agent_calls = cfg->agent_calls;
    /* a backward node's or a hand-off worker's call, as gpu_api (which counts those it probes) */
    if (gpu_apply_origin(pid, tid, &c->call) && agent_calls)
        gpu_stat_inc(c->call.origin_node ? GPU_STAT_NODE_CALLS : GPU_STAT_HANDED_OFF);
    if (!agent_calls) {  /* the probed driver call this runtime call makes may adopt the id */
        struct gpu_orphan orphan = {};
        orphan.pid = pid;
        orphan.correlation = corr;
        orphan.time_ns = c->api_start_ns;
        gpu_orphans.update(&tid, &orphan);
    }
}

/* The scratch's call (dev_corr_scratch) into the join table under its id corr. */
static __always_inline void dev_corr_keep(__u32 pid, __u32 corr) {
    int zero = 0;
    struct dev_corr *c = dev_corr_scratch.lookup(&zero);
    __u64 *next = dev_corr_next.lookup(&zero);
    if (!c || !next)
        return;
    __u32 j = (__u32)__sync_fetch_and_add(next, 1) & (DEV_CORR_ENTRIES - 1);
    struct dev_corr_slot *slot = dev_corr.lookup(&j);
    __u32 i = corr & (DEV_CORR_IDS - 1);
    __u64 *ids = dev_corr_ids.lookup(&i);
    if (!slot || !ids)
        return;
    __u64 now = c->api_start_ns;
    struct dev_corr_slot *old = dev_corr_slot_of(pid, (__u32)(*ids >> 32)); /* the call whose id entry this is */
    if (dev_corr_live(slot, now) || (old && old != slot && dev_corr_live(old, now)))
        dev_stat_add(DEV_STAT_CORR_FULL, 1);
    slot->key.pid = 0; /* names no id while it is rewritten */
    slot->corr = *c;
    slot->key.correlation = corr;
    slot->key.pid = pid;
    *ids = ((__u64)corr << 32) | j;
}

#ifdef DEV_WALK_CONTINUED
/* on_dev_correlation's unprobed call, continued (dev_walk): its path with the continuation, then kept. */
int on_dev_correlation_walk(struct pt_regs *ctx) {
    __u64 id = bpf_get_current_pid_tgid();
    __u32 pid = id >> 32, tid = (__u32)id;
    int zero = 0;
    __u32 *corr = dev_walk_corr.lookup(&zero);
    struct dev_config *cfg = dev_config.lookup(&zero);
    if (!corr || !cfg)
        return 0;
    __u32 cid = *corr;
    dev_unprobed_path(ctx, pid, tid, cid, cfg->cont_slot);
    dev_corr_keep(pid, cid);
    return 0;
}
#endif

int on_dev_correlation(struct pt_regs *ctx) {
    __u64 id = bpf_get_current_pid_tgid();
    __u32 pid = id >> 32, tid = (__u32)id;
    DEV_USDT_OPEN(ctx, pid, s, u);
    __u32 corr = (__u32)usdt_arg(&u, s, 0);
    __u32 api = (__u32)usdt_arg(&u, s, 1);
    __u64 fn = usdt_arg(&u, s, 2);
    dev_stat_add(DEV_STAT_CORRELATIONS, 1);
    int zero = 0;
    struct dev_corr *c = dev_corr_scratch.lookup(&zero);
    if (!c)
        return 0;
    __builtin_memset(c, 0, sizeof(*c));
    c->api = api;
    c->fn_name = fn;
    c->api_start_ns = bpf_ktime_get_ns();
    /* The API call this callback runs inside: the one in flight on this thread, or (sampled mode's
     * entry-only calls leave none in flight) the thread's last call, if it began moments ago. */
    struct gpu_key *inside = NULL;
    int zero_cfg = 0;
    struct dev_config *cfg = dev_config.lookup(&zero_cfg);
    int agent_calls = cfg && cfg->agent_calls;
    struct gpu_inflight *f = gpu_inflight.lookup(&tid);
    if (f) {
        if (f->key.pid == pid)
            inside = &f->key;
    } else if (!agent_calls) {
        struct gpu_last_call *last = gpu_last.lookup(&tid);
        if (last && last->key.pid == pid && c->api_start_ns - last->entry_ns <= GPU_JOIN_WINDOW_NS)
            inside = &last->key;
    }
    if (inside) {
        c->call = *inside;
        if (cfg && cfg->trace)
            dev_learn_name(pid, fn);  /* CUPTI's function name: names the call in the trace */
    } else {  /* a call the GPU API probes do not track (or sampled mode's entry-only calls) */
        dev_stat_add(DEV_STAT_UNPROBED, 1);
        c->call.pid = pid;
        c->call.tid = tid;
        c->call.api_id = DEV_API_UNPROBED;
        c->call.flags = GPU_KEY_F_SAMPLED;
        dev_learn_name(pid, fn);  /* CUPTI's function name: names the call in the tree */
#ifdef DEV_WALK_CONTINUED
        if (cfg && cfg->cont_slot != GPU_NO_CONTINUE) {
            __u32 *pass = dev_walk_corr.lookup(&zero);
            if (pass) {
                *pass = corr;
                dev_walk.call(ctx, 0);  /* does not return, unless the program is not in dev_walk */
            }
        }
#endif
        dev_unprobed_path(ctx, pid, tid, corr, GPU_NO_CONTINUE);
    }
    dev_corr_keep(pid, corr);
    return 0;
}

int on_dev_api_exit(struct pt_regs *ctx) {
    int zero_cfg = 0;
    struct dev_config *cfg = dev_config.lookup(&zero_cfg);
    if (!cfg || !cfg->trace)
        return 0;
    __u64 id = bpf_get_current_pid_tgid();
    __u32 pid = id >> 32;
    DEV_USDT_OPEN(ctx, pid, s, u);
    __u32 corr = (__u32)usdt_arg(&u, s, 0);
    struct dev_corr *c = dev_corr_find(pid, corr);
    if (!c)
        return 0;
    struct dev_event *e = dev_events.ringbuf_reserve(sizeof(struct dev_event));
    if (!e) {
        dev_stat_add(DEV_STAT_TRACE_LOST, 1);
        return 0;
    }
    __builtin_memset(e, 0, sizeof(*e));
    e->type = DEV_EV_API;
    e->start_ns = c->api_start_ns;
    e->end_ns = bpf_ktime_get_ns();
    e->pid = pid;
    e->tid = (__u32)id;
    e->correlation = corr;
    e->api_id = c->call.api_id;
    e->name = c->fn_name;
    e->user_stack = c->call.user_stack;
    e->py_stack = c->call.py_stack;
    e->stream_handle = c->call.stream;
    e->device = c->api;  /* domain << 16 | cbid: runtime or driver */
    dev_events.ringbuf_submit(e, 0);
    return 0;
}

/* --- batches of records ------------------------------------------------------------------------------ */

static __always_inline void dev_record_one(__u32 pid, struct dev_record *r, struct dev_config *cfg) {
    dev_stat_add(DEV_STAT_RECORDS, 1);
    if (cfg && r->end_ns <= cfg->start_ns) {  /* finished before this capture began */
        dev_stat_add(DEV_STAT_BEFORE, 1);
        return;
    }
    int zero = 0;
    struct dev_span *span = cfg && cfg->spans && r->kind != DEV_KIND_SYNC ? dev_span.lookup(&zero) : NULL;
    if (span) {
        __u64 took = r->end_ns > r->start_ns ? r->end_ns - r->start_ns : 0;
        if (r->start_ns < cfg->share_from_ns) {  /* an earlier share's work, handed over late */
            span->stale++;
            span->stale_ns += took;
        } else {
            if (!span->first_start_ns || r->start_ns < span->first_start_ns)
                span->first_start_ns = r->start_ns;
            if (r->end_ns > span->last_end_ns)
                span->last_end_ns = r->end_ns;
            span->records++;
            span->device_ns += took;
        }
    }
    struct dev_key *k = dev_key_scratch.lookup(&zero);
    if (!k)
        return;
    __builtin_memset(k, 0, sizeof(*k));
    struct gpu_corr_key ck = {};
    ck.pid = pid;
    /* Sampled captures: the announced call that stands for this record's call (its thread's last one). */
    int sampled = (r->flags & DEV_REC_F_SAMPLED) && r->sample != r->correlation;
    ck.correlation = (r->flags & DEV_REC_F_SAMPLED) ? r->sample : r->correlation;
    struct dev_corr *c = dev_corr_find(pid, ck.correlation);
    if (c) {
        c->joined = 1;
        k->call = c->call;
        struct gpu_key *adopted = c->call.api_id == DEV_API_UNPROBED ?
            gpu_adopted.lookup(&ck) : NULL;
        if (adopted) {
            k->call = *adopted;  /* the probed driver call made inside the unprobed runtime call */
        } else if (c->call.api_id == DEV_API_UNPROBED) {
            k->fn_name = c->fn_name;
            k->flags |= DEV_KEY_F_UNPROBED;
            if (r->kind == DEV_KIND_KERNEL) {  /* no API probe read the launch: the record's shape */
                k->call.grid[0] = r->grid[0];
                k->call.grid[1] = r->grid[1];
                k->call.grid[2] = r->grid[2];
                k->call.block[0] = r->block[0];
                k->call.block[1] = r->block[1];
                k->call.block[2] = r->block[2];
                k->call.shared_mem = r->shared_mem;
            }
        }
        if (sampled) {
            k->flags |= DEV_KEY_F_SAMPLED;
            dev_stat_add(DEV_STAT_SAMPLED, 1);
        }
    } else {
        k->call.pid = pid;
        k->flags |= DEV_KEY_F_UNKNOWN;
        dev_stat_add(DEV_STAT_UNKNOWN, 1);
    }
    if (r->kind == DEV_KIND_KERNEL) {
        k->name = r->name;
        dev_learn_name(pid, r->name);
    }
    k->device = r->device;
    k->kind = r->kind;
    k->copy_kind = r->copy_kind;
    if (r->flags & DEV_REC_F_GRAPH) {
        k->flags |= DEV_KEY_F_GRAPH;
        /* the replayed node's own path: where it was made (the captured launch), below the replay's */
        struct dev_graph_key gk = {};
        gk.pid = pid;
        gk.node = r->graph_node;
        struct gpu_key *made = r->graph_node ? dev_graph_nodes.lookup(&gk) : NULL;
        if (made && (made->flags & GPU_KEY_F_SAMPLED) && (made->user_stack || made->py_stack)) {
            k->call.origin_tid = made->tid;
            k->call.origin_user_stack = made->user_stack;
            k->call.origin_py_stack = made->py_stack;
            k->call.origin_label = DEV_GRAPH_MADE_LABEL;
            k->call.origin_node = 0;
            dev_stat_add(DEV_STAT_GRAPH_PLACED, 1);
        } else {
            dev_stat_add(DEV_STAT_GRAPH_UNPLACED, 1);
        }
    }
    __u64 dt = r->end_ns - r->start_ns;
    struct dev_val zero_val = {};
    int slot = 0;
    struct dev_val *v = counts_get(dev_counts.lookup(&slot), k, &zero_val);
    if (v) {
        __sync_fetch_and_add(&v->count, 1);
        __sync_fetch_and_add(&v->time_ns, dt);
        __sync_fetch_and_add(&v->bytes, r->bytes);
        if (r->api_ns && k->call.api_id == DEV_API_UNPROBED && !(r->flags & DEV_REC_F_GRAPH))
            __sync_fetch_and_add(&v->api_time_ns, r->api_ns);  /* a call no uprobe timed: the agent did */
        if (r->kind != DEV_KIND_SYNC)
            dev_stat_add(DEV_STAT_TIME_NS, dt);
    } else {
        dev_stat_add(DEV_STAT_MAP_FULL, 1);
    }
    if (cfg && cfg->trace) {
        struct dev_event *e = dev_events.ringbuf_reserve(sizeof(struct dev_event));
        if (e) {
            __builtin_memset(e, 0, sizeof(*e));
            e->type = DEV_EV_RECORD;
            e->start_ns = r->start_ns;
            e->end_ns = r->end_ns;
            e->bytes = r->bytes;
            e->name = r->name;
            e->graph_node = r->graph_node;
            e->pid = pid;
            e->tid = k->call.tid;
            e->correlation = r->correlation;
            e->stream = r->stream;
            e->device = r->device;
            e->api_id = k->call.api_id;
            e->kind = r->kind;
            e->copy_kind = r->copy_kind;
            e->known = c ? 1 : 0;
            e->user_stack = k->call.user_stack;
            e->py_stack = k->call.py_stack;
            e->stream_handle = k->call.stream;
            dev_events.ringbuf_submit(e, 0);
        } else {
            dev_stat_add(DEV_STAT_TRACE_LOST, 1);
        }
    }
    /* The slot stays: graph launches have a record per node under one id, and an announced call of a
     * sampled capture stands for the calls after it; the call DEV_CORR_ENTRIES later takes the slot. */
}

int on_dev_batch(struct pt_regs *ctx) {
    __u32 pid = bpf_get_current_pid_tgid() >> 32;
    DEV_USDT_OPEN(ctx, pid, s, u);
    __u64 records = usdt_arg(&u, s, 0);
    __u32 n = (__u32)usdt_arg(&u, s, 1);
    dev_stat_add(DEV_STAT_BATCHES, 1);
    if (n > DEV_BATCH) {
        dev_stat_add(DEV_STAT_BATCH_CUT, 1);
        n = DEV_BATCH;
    }
    int zero = 0;
    struct dev_config *cfg = dev_config.lookup(&zero);
    for (__u32 i = 0; i < DEV_BATCH; i++) {
        asm volatile("" : "+r"(i));  /* keep this counted loop as written: the verifier bounds it by i */
        if (i >= n)
            break;
        struct dev_record r = {};
        if (bpf_probe_read_user(&r, sizeof(r), (void *)(records + (__u64)i * sizeof(r))))
            break;
        dev_record_one(pid, &r, cfg);
    }
    return 0;
}

/* --- the agent's state ------------------------------------------------------------------------------ */

/* A graph node made inside an announced call, or cloned from a node (see device_activity.h): keeps the path. */
int on_dev_graph_node(struct pt_regs *ctx) {
    __u32 pid = bpf_get_current_pid_tgid() >> 32;
    DEV_USDT_OPEN(ctx, pid, s, u);
    struct dev_graph_key k = {};
    k.pid = pid;
    k.node = usdt_arg(&u, s, 0);
    __u64 original = usdt_arg(&u, s, 1);
    __u32 corr = (__u32)usdt_arg(&u, s, 2);
    struct gpu_key *made = NULL;
    if (original) {
        struct dev_graph_key ok = {};
        ok.pid = pid;
        ok.node = original;
        made = dev_graph_nodes.lookup(&ok);
    } else {
        struct dev_corr *c = dev_corr_find(pid, corr);
        if (c)
            made = &c->call;
    }
    if (!made) {
        dev_stat_add(DEV_STAT_GRAPH_NODES_UNKNOWN, 1);
        return 0;
    }
    dev_graph_nodes.update(&k, made);
    dev_stat_add(DEV_STAT_GRAPH_NODES, 1);
    return 0;
}

int on_dev_flushed(struct pt_regs *ctx) {
    __u32 pid = bpf_get_current_pid_tgid() >> 32;
    struct usdt_site *s = dev_site(ctx, pid);
    if (!s)
        return 0;
    int zero = 0;
    struct dev_flush *f = dev_flush.lookup(&zero);
    if (!f)
        return 0;
    struct usdt_regs u;
    usdt_load(ctx, &u);
    f->sequence = usdt_arg(&u, s, 0);
    f->started_ns = usdt_arg(&u, s, 1);
    f->dropped = usdt_arg(&u, s, 2);
    f->unfinished = s->nargs > 3 ? usdt_arg(&u, s, 3) : 0;  /* agents before the count: three arguments */
    __sync_fetch_and_add(&f->flushes, 1);
    return 0;
}

int on_dev_status(struct pt_regs *ctx) {
    __u32 pid = bpf_get_current_pid_tgid() >> 32;
    struct usdt_site *s = dev_site(ctx, pid);
    if (!s)
        return 0;
    int zero = 0;
    struct dev_flush *f = dev_flush.lookup(&zero);
    struct usdt_regs u;
    usdt_load(ctx, &u);
    if (f) {
        f->status = (__s64)usdt_arg(&u, s, 0);
        if (f->status == DEV_AGENT_ACTIVE)
            f->active_ns = bpf_ktime_get_ns();
        else if (f->status == DEV_AGENT_IDLE)
            f->idle_ns = bpf_ktime_get_ns();
    }
    return 0;
}

/* flush_request: attached only for its semaphore (the daemon's "flush now"). */
int on_dev_request(struct pt_regs *ctx) {
    return 0;
}
#endif
