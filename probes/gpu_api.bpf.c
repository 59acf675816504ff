/* GPU API probes: one entry and one return handler for every CUDA / HIP / NCCL entry point.
 * The entry handler finds which API fired by its address in the target (gpu_addrs, filled by user
 * space per process), reads the arguments that matter, captures the call path (Python walker and
 * native stack) of every call, or in sampled mode of the process's first call after each
 * sample_interval_ns (gpu_config; gpu_ranges holds when), and parks the call in gpu_inflight; the return handler
 * adds calls, time and bytes to gpu_counts. A call made inside another probed call on the same thread
 * (the runtime calling the driver) is not counted twice: its caller is inside a GPU library (gpu_ranges),
 * or it runs deeper on the stack than the outer call's entry. Entry-only APIs (sampled mode) are counted
 * at entry, with no return probe and no time.
 * Settings (-D): GPU_NODE_ENTRIES, GPU_COUNT_ENTRIES, GPU_COUNT_SPARE and GPU_COUNT_FLAGS (counts_map.bpf.h), GPU_ADDR_ENTRIES, GPU_NAME_ENTRIES, GPU_INFLIGHT_ENTRIES,
 * GPU_STACK_ENTRIES, GPU_OBJECT_ENTRIES, and GPU_DWARF_STACKS: native stacks by the .eh_frame unwinder
 * (when it is composed in) instead of frame pointers. Off by default: with the Python walker and the
 * unwinder both inlined, this program passes the verifier's 1M-instruction bound no more. */
#include <uapi/linux/ptrace.h>
#include "gpu_api.h"
#include "counts_map.bpf.h"

BPF_HASH(gpu_addrs, struct gpu_addr_key, struct gpu_api_spec, GPU_ADDR_ENTRIES);
BPF_HASH(gpu_inflight, __u32, struct gpu_inflight, GPU_INFLIGHT_ENTRIES);
BPF_ARRAY(gpu_ranges, struct gpu_ranges, GPU_PROCS_MAX); /* by the process's slot (gpu_api_spec.proc_slot) */
BPF_HASH(gpu_origins, __u32, struct gpu_origin, 1024);
/* Work items (autograd nodes): creation path by sequence number, the item each thread runs, type names. */
BPF_TABLE("lru_hash", struct gpu_node_key, struct gpu_node_origin, gpu_node_origins, GPU_NODE_ENTRIES);
BPF_HASH(gpu_node_pending, __u32, __u64, GPU_INFLIGHT_ENTRIES);  /* tid -> entry sp of NODE_CREATED */
BPF_HASH(gpu_node_runs, __u32, struct gpu_node_run, GPU_INFLIGHT_ENTRIES);
BPF_HASH(gpu_node_types, struct gpu_fn_key, struct gpu_type_name, 4096);
BPF_PERCPU_ARRAY(gpu_type_scratch, struct gpu_type_name, 1);
/* pid << 32 | tid -> the thread's name at its first GPU call with a path. Keyed by the process too: a program
 * shared by captures at once outlives their threads, and a tid another process reuses is a new thread. User space
 * drops a process's entries as its capture detaches, and its gone threads' after each window. */
BPF_HASH(gpu_comms, __u64, struct gpu_comm, GPU_INFLIGHT_ENTRIES);
/* 1 once any process of this program has had a hand-off call or run a work item: until then no call looks
 * for an origin (two hash look-ups a call saved where there are none: inference, plain CUDA) */
BPF_ARRAY(gpu_origins_used, __u32, 1);
#ifdef GPU_LAST_CALL  /* set by the device-activity family, which joins CUPTI's records to these calls */
BPF_HASH(gpu_last, __u32, struct gpu_last_call, GPU_INFLIGHT_ENTRIES);
BPF_HASH(gpu_orphans, __u32, struct gpu_orphan, GPU_INFLIGHT_ENTRIES);
BPF_TABLE("lru_hash", struct gpu_corr_key, struct gpu_key, gpu_adopted, GPU_INFLIGHT_ENTRIES);
#endif
/* Name lookups (GETFUNC, FUNC_ALIAS) in flight: tracked apart from the calls, since the runtime makes
 * them inside a launch when it loads modules lazily. */
BPF_HASH(gpu_getfunc, __u32, struct gpu_inflight, GPU_INFLIGHT_ENTRIES);
COUNTS_MAP(gpu_counts, struct gpu_key, struct gpu_val, GPU_COUNT_ENTRIES, GPU_COUNT_SPARE,
           GPU_COUNT_FLAGS);
BPF_HASH(gpu_fn_names, struct gpu_fn_key, struct gpu_fn_name, GPU_NAME_ENTRIES);
BPF_PERCPU_ARRAY(gpu_stats, __u64, GPU_STAT__COUNT);
BPF_PERCPU_ARRAY(gpu_scratch, struct gpu_inflight, 1);
BPF_PERCPU_ARRAY(gpu_name_scratch, struct gpu_fn_name, 1);
BPF_ARRAY(gpu_config, struct gpu_config, 1);
/* Native stacks by their hash (see gpu_fp_stack); allocated as stacks come, not at load. */
BPF_F_TABLE("hash", __u64, struct gpu_fp_stack, gpu_stacks, GPU_STACK_ENTRIES, BPF_F_NO_PREALLOC);
/* Frames are read a window at a time: the bytes from a frame to the end of its page (at most GPU_FP_WIN),
 * which hold the next frames too when they are near (a helper call per frame costs more than the copy);
 * a window never crosses a page, so it cannot fault where the frame itself would not. */
#define GPU_FP_WIN 1024
struct gpu_fp_scratch {
    struct gpu_fp_stack st;
    __u64 hash;
    __u64 base; /* the user address win[0] was read from */
    __u64 len;  /* bytes of win read there (0: none) */
#ifdef GPU_FP_CONTINUE
    __u64 lost_sp;  /* where the walk met a frame pointer that is none (0: it did not) */
    __u64 lost_bp;
#ifdef DEEPCTX_NATIVE_UNWIND
    struct native_regs cont_regs;
#endif
#endif
    __u64 last_id;  /* the stack this CPU interned last, in generation last_gen of gpu_stacks_gen */
    __u64 last_gen;
    __u8 win[GPU_FP_WIN + 16];
};
BPF_PERCPU_ARRAY(gpu_fp_scratch, struct gpu_fp_scratch, 1);
struct gpu_entry_words {
    __u64 w[8];  /* GPU_ENTRY_WORDS */
};
BPF_PERCPU_ARRAY(gpu_words_scratch, struct gpu_entry_words, 1);
/* Raised by user space before it empties gpu_stacks (gpu_api.py, clear_window): an id a CPU kept as interned
 * from before is looked up again. */
BPF_ARRAY(gpu_stacks_gen, __u64, 1);
BPF_HASH(gpu_objects, struct gpu_fn_key, struct gpu_obj_info, GPU_OBJECT_ENTRIES);
BPF_PERCPU_ARRAY(gpu_obj_scratch, struct gpu_obj_info, 1);

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
static __always_inline void gpu_stat_inc(int idx) {
    __u64 *v = gpu_stats.lookup(&idx);
    if (v)
        (*v)++;
}
#endif

/* The words at the stack pointer at a probed function's entry, read once a call (a helper call costs more
 * than the copy): [0] the return address (x86-64; arm64 keeps it in the link register), [1] to [7] the
 * argument slots 6 to 12. In exact mode, where every call's native stack is walked, they come with the
 * GPU_FP_WIN bytes above the stack pointer, read into the frame-pointer walk's window: the caller's frame
 * is usually among them, and the walk starts without a read of its own (gpu_fp_capture). Not for a driver
 * entry point (GPU_SPEC_F_DRIVER): the runtime's calls into it, most of its calls, need only the words. */
#define GPU_ENTRY_WORDS 8
#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
static __always_inline void gpu_read_entry_words(struct pt_regs *ctx, __u64 *w, const struct gpu_api_spec *spec) {
    void *sp = (void *)PT_REGS_SP(ctx);
    __u32 zero = 0;
    struct gpu_fp_scratch *s = gpu_fp_scratch.lookup(&zero);
    struct gpu_config *cfg = gpu_config.lookup(&zero);
    if (!s)
        return;
    s->len = 0;
    if (cfg && !cfg->sample_interval_ns && !(spec->flags & GPU_SPEC_F_DRIVER) &&
        !bpf_probe_read_user(s->win, GPU_FP_WIN, sp)) {
        s->base = (__u64)sp;
        s->len = GPU_FP_WIN;
        __builtin_memcpy(w, s->win, 8 * GPU_ENTRY_WORDS);
        return;
    }
    if (bpf_probe_read_user(w, 8 * GPU_ENTRY_WORDS, sp)) {
        /* the words past the return address end the stack's mapping: read what is there */
        __builtin_memset(w, 0, 8 * GPU_ENTRY_WORDS);
        bpf_probe_read_user(w, 8, sp);
    }
}

/* Where the probed call returns to, at its entry. */
static __always_inline __u64 gpu_return_address(struct pt_regs *ctx, const __u64 *w) {
#if defined(__TARGET_ARCH_arm64)
    return ctx->regs[30];
#else
    return w[0];
#endif
}
#endif

/* A register's value as loaded: the compiler may not merge the switch's loads below into one load from a
 * computed context address, which the verifier refuses ("dereference of modified ctx ptr"). */
#define GPU_REG(x) ({ __u64 __v = (x); asm volatile("" : "+r"(__v)); __v; })

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
/* The value of argument slot `slot` at function entry (x86-64 SysV; see gpu_api.h); w: the entry words. */
static __always_inline __u64 gpu_arg(struct pt_regs *ctx, const __u64 *w, int slot) {
    switch (slot) {
    case 0: return GPU_REG(PT_REGS_PARM1(ctx));
    case 1: return GPU_REG(PT_REGS_PARM2(ctx));
    case 2: return GPU_REG(PT_REGS_PARM3(ctx));
    case 3: return GPU_REG(PT_REGS_PARM4(ctx));
    case 4: return GPU_REG(PT_REGS_PARM5(ctx));
    case 5: return GPU_REG(PT_REGS_PARM6(ctx));
    }
    if (slot < 6 || slot > 12)  /* also GPU_NO_SLOT */
        return 0;
    return w[(slot - 5) & (GPU_ENTRY_WORDS - 1)];
}

static __always_inline __u32 nccl_type_size(__u64 t) {
    switch (t) {
    case 2: case 3: case 7: return 4;    /* int32 uint32 float32 */
    case 4: case 5: case 8: return 8;    /* int64 uint64 float64 */
    case 6: case 9: return 2;            /* float16 bfloat16 */
    default: return 1;                   /* int8 uint8 fp8 */
    }
}

static __always_inline void gpu_read_launch(struct pt_regs *ctx, const __u64 *w, struct gpu_api_spec *spec,
                                            struct gpu_key *k) {
    __u64 a, b;
    switch (spec->layout) {
    case GPU_LAYOUT_LAUNCH_DIM3:
        k->object = gpu_arg(ctx, w, 0);
        a = gpu_arg(ctx, w, 1);
        k->grid[0] = (__u32)a; k->grid[1] = (__u32)(a >> 32); k->grid[2] = (__u32)gpu_arg(ctx, w, 2);
        b = gpu_arg(ctx, w, 3);
        k->block[0] = (__u32)b; k->block[1] = (__u32)(b >> 32); k->block[2] = (__u32)gpu_arg(ctx, w, 4);
        k->shared_mem = (__u32)gpu_arg(ctx, w, 6);
        k->stream = gpu_arg(ctx, w, 7);
        break;
    case GPU_LAYOUT_LAUNCH_SCALARS:
        k->object = gpu_arg(ctx, w, 0);
        k->grid[0] = gpu_arg(ctx, w, 1); k->grid[1] = gpu_arg(ctx, w, 2); k->grid[2] = gpu_arg(ctx, w, 3);
        k->block[0] = gpu_arg(ctx, w, 4); k->block[1] = gpu_arg(ctx, w, 5); k->block[2] = gpu_arg(ctx, w, 6);
        k->shared_mem = (__u32)gpu_arg(ctx, w, 7);
        k->stream = gpu_arg(ctx, w, 8);
        break;
    case GPU_LAYOUT_LAUNCH_CU_EX: {
        /* CUlaunchConfig: 7 x u32 (grid, block, sharedMemBytes), then hStream at 32 */
        __u32 dims[7] = {};
        __u64 cfg = gpu_arg(ctx, w, 0);
        k->object = gpu_arg(ctx, w, 1);
        bpf_probe_read_user(dims, sizeof(dims), (void *)cfg);
        bpf_probe_read_user(&k->stream, sizeof(k->stream), (void *)(cfg + 32));
        k->grid[0] = dims[0]; k->grid[1] = dims[1]; k->grid[2] = dims[2];
        k->block[0] = dims[3]; k->block[1] = dims[4]; k->block[2] = dims[5];
        k->shared_mem = dims[6];
        break;
    }
    case GPU_LAYOUT_LAUNCH_RT_EX: {
        /* cudaLaunchConfig_t: dim3 gridDim, dim3 blockDim, size_t dynamicSmemBytes @24, stream @32 */
        __u32 dims[6] = {};
        __u64 smem = 0;
        __u64 cfg = gpu_arg(ctx, w, 0);
        k->object = gpu_arg(ctx, w, 1);
        bpf_probe_read_user(dims, sizeof(dims), (void *)cfg);
        bpf_probe_read_user(&smem, sizeof(smem), (void *)(cfg + 24));
        bpf_probe_read_user(&k->stream, sizeof(k->stream), (void *)(cfg + 32));
        k->grid[0] = dims[0]; k->grid[1] = dims[1]; k->grid[2] = dims[2];
        k->block[0] = dims[3]; k->block[1] = dims[4]; k->block[2] = dims[5];
        k->shared_mem = (__u32)smem;
        break;
    }
    }
}

/* First launch of a kernel handle in a process: keep its first words and the strings they point to. */
static __always_inline void gpu_remember_object(__u32 pid, __u64 handle) {
    struct gpu_fn_key ok = {};
    ok.pid = pid;
    ok.handle = handle;
    if (!handle || gpu_objects.lookup(&ok))
        return;
    int zero = 0;
    struct gpu_obj_info *info = gpu_obj_scratch.lookup(&zero);
    if (!info)
        return;
    /* no memset of the whole value: LLVM's BPF backend cannot expand one this large */
    __builtin_memset(info->words, 0, sizeof(info->words));
    bpf_probe_read_user(info->words, sizeof(info->words), (void *)handle);
#pragma unroll
    for (int i = 0; i < GPU_OBJ_WORDS; i++) {
        info->strs[i * GPU_OBJ_STR] = 0;
        if (info->words[i] > 4096)
            bpf_probe_read_user_str(&info->strs[i * GPU_OBJ_STR], GPU_OBJ_STR, (void *)info->words[i]);
    }
    gpu_objects.update(&ok, info);
    gpu_stat_inc(GPU_STAT_OBJECTS);
}
#endif

#define GPU_FNV_PRIME 0x100000001b3ULL

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
#ifndef GPU_CONT_NEAR
#define GPU_CONT_NEAR 2  /* a callback's walk: lost within this many kept frames of a GEMM library's */
#endif
/* 1 where x < n (unsigned), 0 elsewhere, by arithmetic: the borrow of x - n. A comparison would be a branch, and
 * the verifier walks on from each side of each one (three frames' tests so took it past its bound). */
static __always_inline __u64 gpu_below(__u64 x, __u64 n) {
    return ((~x & n) | (~(x ^ n) & (x - n))) >> 63;
}

/* 1 where ip lies in one of the process's GEMM and convolution libraries (r->cont_*; an empty slot holds nothing),
 * without a branch: the callback's test of two frames (gpu_continued). */
static __always_inline __u64 gpu_in_continued(struct gpu_ranges *r, __u64 ip) {
    __u64 hit = 0;
#pragma unroll
    for (int i = 0; i < GPU_CONT_RANGES; i++)
        hit |= gpu_below(ip - r->cont_start[i], r->cont_end[i] - r->cont_start[i]);
    return hit;
}

/* Was this call made from a GEMM or convolution library (gpu_ranges.cont_*)? slot: the process's, or
 * GPU_NO_CONTINUE where no walk is continued (a node's creation). At a probed call's entry (scan 0), its return
 * address ret tells. In the CUPTI agent's callback (scan 1: device activity's paths) the call's return address is
 * not at hand, and the last GPU_CONT_NEAR frames the walk kept tell: the frame-pointer walk passes through the
 * agent, CUPTI, the runtime and cuBLAS, and is lost just above them (PyTorch's GEMMs: the last frame kept is
 * libtorch_cuda's gemm_internal_cublas, the one before it cuBLAS's, H100 2026-12-05). Three frames took the
 * program past its 512-byte stack; a scan of the innermost twelve as a loop, past the verifier's bound. scan is a
 * constant at each call site, so each program holds one of the two tests. No range test branches: the verifier
 * walks what follows once (the exact-mode program: 662K instructions with the continuation). */
static __always_inline int gpu_continued(struct gpu_fp_scratch *s, __u64 ret, __u32 slot, int scan) {
    if (slot == GPU_NO_CONTINUE || (!scan && !ret))
        return 0;
    struct gpu_ranges *r = gpu_ranges.lookup(&slot);
    if (!r)
        return 0;
    if (!scan) {  /* one address: compared (the form measured on the H100, 33 ns a run with the gate) */
        __u64 hit = 0;
#pragma unroll
        for (int i = 0; i < GPU_CONT_RANGES; i++) {
            __u64 lo = r->cont_start[i], n = r->cont_end[i] - lo;  /* an empty slot: n 0, nothing below it */
            hit |= (__u64)(ret - lo < n);
        }
        return hit != 0;
    }
    __u64 depth = s->st.depth, hit = 0;  /* two addresses: compared, they took the verifier past its bound */
#pragma unroll
    for (int k = 1; k <= GPU_CONT_NEAR; k++) {
        __u64 kept = (__u64)((__s64)k - 1 - (__s64)depth) >> 63;  /* 1 where k <= depth: no branch */
        hit |= gpu_in_continued(r, s->st.ip[(depth - k) & (GPU_FP_DEPTH - 1)]) & kept;
    }
    return hit != 0;
}

/* Interns the calling thread's native stack by frame pointers; returns its id (its hash, never 0), or 0
 * when it could not be kept (the map is full). At a function's first instruction its caller has no frame
 * yet: ret is its return address (gpu_return_address), the frame the kernel's own walk adds for uprobes at
 * function entry; 0 elsewhere. The depth and
 * the running hash live in the scratch value, not in registers, so that every way out of the loop
 * reaches the code after it in the same verifier state (what follows, the Python walk, is verified
 * once, not once per exit). `off > GPU_FP_WIN - 16` also catches a frame below the window (off wraps). */
static __always_inline __u64 gpu_fp_capture(struct pt_regs *ctx, __u64 ret, __u32 pid, __u32 slot, int scan) {
    __u32 zero = 0;
    struct gpu_fp_scratch *s = gpu_fp_scratch.lookup(&zero);
    if (!s)
        return 0;
    __u64 sp = PT_REGS_SP(ctx), fp = PT_REGS_FP(ctx), low = sp;
    __u64 ip = PT_REGS_IP(ctx);
    s->st.ip[0] = ip;
    s->st.depth = 1;
    s->hash = (0xcbf29ce484222325ULL ^ ip) * GPU_FNV_PRIME;
    if (ret) {  /* at a function's entry: its return address */
        s->st.ip[1] = ret;
        s->hash = (s->hash ^ ret) * GPU_FNV_PRIME;
        s->st.depth = 2;
    }
    if (!ret)  /* not at a probed entry (a callback's, a return's path): the window is an earlier walk's, stale */
        s->len = 0;
    s->st.flags = GPU_FP_F_TRUNCATED; /* until a frame ends the walk before its bound */
    s->st.cont = 0;
#ifdef GPU_FP_CONTINUE
    s->lost_sp = 0;
#endif
    /* s->len: the window gpu_read_entry_words read at the stack pointer this call, or 0 */
    for (int i = 0; i < GPU_FP_DEPTH - 2; i++) {
        if (fp < low || fp - sp > GPU_FP_SPAN || (fp & 7)) {
            s->st.flags = 0;
#ifdef GPU_FP_CONTINUE
            /* code without frame pointers used the register: the frame of the last return address begins
             * above it (low), and what it held is that frame's rbp */
            s->lost_sp = i ? low : (ret ? low + 8 : 0); /* at i 0, low is the entry's sp: [sp] holds ret */
            s->lost_bp = fp;
#endif
            break;
        }
        __u64 off = fp - s->base;
        if (off > GPU_FP_WIN - 16 || off + 16 > s->len) { /* not in the window: read one from this frame */
            __u32 room = 4096 - (fp & 4095);
            if (room > GPU_FP_WIN)
                room = GPU_FP_WIN;
            if (room < 16)
                room = 16; /* the frame straddles two pages: read just it */
            if (bpf_probe_read_user(s->win, room, (void *)fp)) {
                s->st.flags = 0;
                break;
            }
            s->base = fp;
            s->len = room;
            off = 0;
        }
        off &= GPU_FP_WIN - 1;
        __u64 next = *(__u64 *)(s->win + off); /* the caller's frame pointer, the return address */
        __u64 ret = *(__u64 *)(s->win + off + 8);
        if (!ret) {
            s->st.flags = 0;
            break;
        }
        __u32 d = s->st.depth; /* 1 + i, or 2 + i after an entry's return address */
        s->st.ip[d & (GPU_FP_DEPTH - 1)] = ret;
        s->hash = (s->hash ^ ret) * GPU_FNV_PRIME;
        s->st.depth = d + 1;
        low = fp + 16;
        fp = next;
    }
#if defined(GPU_FP_CONTINUE) && defined(DEEPCTX_NATIVE_UNWIND)
#ifndef GPU_FP_CONTINUE_DEPTH
#define GPU_FP_CONTINUE_DEPTH 24  /* frames the .eh_frame walk adds: the GPU program then verifies in 662K instructions */
#endif
    /* Lost in code without frame pointers (PyTorch's libraries between a GEMM's launch and its operator): the
     * .eh_frame walk takes over from the lost frame (gpu_api.py: native_continue), for the calls that cuBLAS,
     * cuDNN and their like make; PyTorch's own launches find their operator from the frames the walk kept
     * (the launch-bound loop loses every walk in libtorch_cuda: continued, it cost 21% more) */
    if (s->lost_sp && gpu_continued(s, ret, slot, scan)) {
        struct native_regs *r = &s->cont_regs;  /* in the map value: the program's 512-byte stack is full */
        r->ip = s->st.ip[(s->st.depth - 1) & (GPU_FP_DEPTH - 1)];
        r->sp = s->lost_sp;
        r->bp = s->lost_bp;
        r->from_return = 1;
        /* memoized: a launch loop reaches the same lost frame with the same stack above it again and again */
        __u64 cont = native_stack_capture_memo(r, pid, GPU_FP_CONTINUE_DEPTH, WALK_SLOT_TASK);
        s = gpu_fp_scratch.lookup(&zero);
        if (!s)
            return 0;
        s->st.cont = cont;
        s->hash = (s->hash ^ cont) * GPU_FNV_PRIME;
    }
#endif
    __u64 h = (s->hash ^ s->st.depth) * GPU_FNV_PRIME;
    if (h == 0)
        h = 1;
    /* the same stack as this CPU's last call (a launch loop): known to be interned, no hash look-up */
    __u64 *gen = gpu_stacks_gen.lookup(&zero);
    __u64 g = gen ? *gen : 1;
    if (h == s->last_id && g == s->last_gen)
        return h;
    if (!gpu_stacks.lookup(&h)) {
        int rc = gpu_stacks.insert(&h, &s->st);
        if (rc != 0 && rc != -17 /* EEXIST: another CPU kept it meanwhile */)
            return 0;
    }
    s->last_id = h;
    s->last_gen = g;
    return h;
}

/* The calling thread's call path: native stack id (0 = none) and Python stack id. entry_ret: at a function's
 * entry, its return address (gpu_return_address); elsewhere 0. scan: taken in the CUPTI agent's callback (a
 * constant; gpu_continued). */
static __always_inline void gpu_capture_path(struct pt_regs *ctx, __u64 entry_ret, __u32 slot, int scan, __u32 pid,
                                             __u32 tid, __u64 *user_stack, __u64 *py_stack) {
#if defined(DEEPCTX_NATIVE_UNWIND) && defined(GPU_DWARF_STACKS)
    __u32 nflags = 0;
    *user_stack = native_stack_capture(ctx, pid, &nflags, WALK_SLOT_TASK);
#else
    *user_stack = gpu_fp_capture(ctx, entry_ret, pid, slot, scan);
#endif
#ifdef DEEPCTX_PYTHON
    __u32 pyflags = 0;
    *py_stack = python_stack_capture(pid, tid, &pyflags, 1, WALK_SLOT_TASK);
#endif
}

/* Was this call made from inside a probed GPU library (the runtime calling the driver)? */
static __always_inline int gpu_called_by_library(__u64 ret, __u32 slot) {
    struct gpu_ranges *r = gpu_ranges.lookup(&slot);
    if (!r)
        return 0;
#pragma unroll
    for (int i = 0; i < GPU_MAX_RANGES; i++) {
        if (ret >= r->start[i] && ret < r->end[i])
            return 1;
    }
    return 0;
}

static __always_inline struct gpu_val *gpu_val_of(struct gpu_key *key) {
    struct gpu_val zero_val = {};
    int slot = 0;
    return counts_get(gpu_counts.lookup(&slot), key, &zero_val);
}

/* A call into its value: timed, its time in dt; untimed, counted only (API time estimated from the timed). */
static __always_inline void gpu_add_to(struct gpu_val *v, __u64 dt, __u64 bytes, int timed) {
    if (v) {
        __sync_fetch_and_add(&v->calls, 1);
        __sync_fetch_and_add(&v->bytes, bytes);
        if (timed && !v->first_ns && !v->timed) {
            v->first_ns = dt | 1;  /* nonzero: taken (two first calls at once: one is kept, counted untimed) */
        } else if (timed) {
            __sync_fetch_and_add(&v->time_ns, dt);
            __sync_fetch_and_add(&v->timed, 1);
        }
    } else {
        gpu_stat_inc(GPU_STAT_MAP_FULL);
    }
}

static __always_inline void gpu_add(struct gpu_key *key, __u64 dt, __u64 bytes, int timed) {
    gpu_add_to(gpu_val_of(key), dt, bytes, timed);
}

/* Who the call is charged to beyond its own thread: the creator of the work item this thread runs
 * (a backward node's forward line), else another thread's hand-off call running in the process. Also
 * used by the device-activity family for the calls only it sees. */
static __always_inline void gpu_origins_in_use(void) {
    int zero = 0;
    __u32 *used = gpu_origins_used.lookup(&zero);
    if (used && !*used)
        *used = 1;
}

static __always_inline int gpu_apply_origin(__u32 pid, __u32 tid, struct gpu_key *k) {
    int zero = 0;
    __u32 *used = gpu_origins_used.lookup(&zero);
    if (used && !*used)
        return 0;
    struct gpu_node_run *run = gpu_node_runs.lookup(&tid);
    if (run) {
        k->origin_user_stack = run->user_stack;
        k->origin_py_stack = run->py_stack;
        k->origin_tid = run->tid;
        k->origin_label = run->label;
        k->origin_node = run->node_type;
        return 1;
    }
    struct gpu_origin *origin = gpu_origins.lookup(&pid);
    if (origin && origin->tid != tid) {
        k->origin_user_stack = origin->user_stack;
        k->origin_py_stack = origin->py_stack;
        k->origin_tid = origin->tid;
        k->origin_label = origin->label;
        return 1;
    }
    return 0;
}

/* A thread starts running a work item: find who created it; name its type once per process. */
static __always_inline void gpu_node_run_entry(struct pt_regs *ctx, const __u64 *w, struct gpu_api_spec *spec,
                                               __u32 pid, __u32 tid) {
    __u64 node = gpu_arg(ctx, w, spec->object_slot);
    struct gpu_node_key nk = {};
    nk.pid = pid;
    if (!node || bpf_probe_read_user(&nk.seq, sizeof(nk.seq), (void *)(node + spec->node_off)))
        return;
    struct gpu_node_origin *o = gpu_node_origins.lookup(&nk);
    if (!o) {
        gpu_stat_inc(GPU_STAT_NODES_UNKNOWN);
        return;
    }
    gpu_stat_inc(GPU_STAT_NODES_RUN);
    struct gpu_node_run run = {};
    run.user_stack = o->user_stack;
    run.py_stack = o->py_stack;
    run.tid = o->tid;
    run.label = spec->api_id;
    run.entry_sp = PT_REGS_SP(ctx);
    bpf_probe_read_user(&run.node_type, sizeof(run.node_type), (void *)node);
    gpu_origins_in_use();  /* before the entry: a launch that sees the flag unset finds no entry to miss */
    gpu_node_runs.update(&tid, &run);
    struct gpu_fn_key tk = {};
    tk.pid = pid;
    tk.handle = run.node_type;
    if (!run.node_type || gpu_node_types.lookup(&tk))
        return;
    /* Itanium C++ ABI: vtable[-1] is the std::type_info, whose second word is the mangled type name */
    __u64 info = 0, name = 0;
    int zero = 0;
    struct gpu_type_name *tn = gpu_type_scratch.lookup(&zero);
    if (!tn)
        return;
    tn->name[0] = 0;
    if (!bpf_probe_read_user(&info, sizeof(info), (void *)(run.node_type - 8)) && info &&
        !bpf_probe_read_user(&name, sizeof(name), (void *)(info + 8)) && name)
        bpf_probe_read_user_str(tn->name, sizeof(tn->name), (void *)name);
    gpu_node_types.update(&tk, tn);
}

/* Sampled mode: is this call the process's first after its sampling interval? Two CPUs may both take one
 * at an interval's start: a sample more, never a count less. Exact mode: every call. */
static __always_inline int gpu_take_path(__u32 slot) {
    int zero = 0;
    struct gpu_config *cfg = gpu_config.lookup(&zero);
    if (!cfg || !cfg->sample_interval_ns)
        return 1;
    __u64 now = bpf_ktime_get_ns();
    struct gpu_ranges *ranges = gpu_ranges.lookup(&slot);
    if (!ranges || now < ranges->next_sample_ns)
        return 0;
    ranges->next_sample_ns = now + cfg->sample_interval_ns;
    return 1;
}

/* A probed call's entry. Returns 1 where its return needs no probe (an uprobe session then leaves the return
 * alone: nested calls, calls counted at entry, launches left untimed), 0 where the return probe must run.
 * The call path is taken at one place for every class that takes one (calls and hand-offs), and what the
 * code after it needs is kept in the scratch value, not in registers: the verifier then walks the Python
 * and native walks once, not once for every way of reaching them (before, the program stood at 954K of the
 * verifier's 1M-instruction bound: tests/integration/test_verifier_headroom.py). */
static __always_inline int gpu_entry(struct pt_regs *ctx, struct gpu_api_spec *spec, struct gpu_addr_key ak,
                                     __u64 id) {
    __u32 tid = (__u32)id;
    __u64 sp = PT_REGS_SP(ctx);
    int zero = 0;
    struct gpu_entry_words *words = gpu_words_scratch.lookup(&zero);  /* not on the 512-byte stack */
    if (!words)
        return 0;
    __u64 *w = words->w;
    gpu_read_entry_words(ctx, w, spec);
    __u64 ret = gpu_return_address(ctx, w);
    if (spec->cls == GPU_CLASS_NODE_CREATED) {  /* its number is known at return */
        gpu_node_pending.update(&tid, &sp);
        return 0;
    }
    if (spec->cls == GPU_CLASS_NODE_RUN) {
        gpu_node_run_entry(ctx, w, spec, ak.pid, tid);
        return 0;
    }
    if (spec->cls == GPU_CLASS_GETFUNC || spec->cls == GPU_CLASS_FUNC_ALIAS) {
        struct gpu_inflight *g = gpu_scratch.lookup(&zero);
        if (!g)
            return 0;
        __builtin_memset(g, 0, sizeof(*g));
        g->key.pid = ak.pid;
        g->cls = spec->cls;
        g->entry_sp = sp;
        g->out_ptr = gpu_arg(ctx, w, spec->object_slot);
        g->name_ptr = gpu_arg(ctx, w, spec->name_slot);
        gpu_getfunc.update(&tid, g);
        return 0;
    }
    int handoff = spec->cls == GPU_CLASS_HANDOFF;
    if (!handoff) {
        if (gpu_called_by_library(ret, spec->proc_slot)) {
            gpu_stat_inc(GPU_STAT_NESTED);
            return 1;
        }
        struct gpu_inflight *outer = gpu_inflight.lookup(&tid);
        if (outer) {
            if (sp < outer->entry_sp) {  /* deeper on the stack: inside the outer probed call */
                gpu_stat_inc(GPU_STAT_NESTED);
                return 1;
            }
            if (!(spec->flags & GPU_SPEC_F_ENTRY_ONLY))
                gpu_stat_inc(GPU_STAT_STALE_INFLIGHT);
        }
        gpu_stat_inc(GPU_STAT_CALLS);
    }

    struct gpu_inflight *f = gpu_scratch.lookup(&zero);
    if (!f)
        return 0;
    __builtin_memset(f, 0, sizeof(*f));
    f->key.pid = ak.pid;
    f->key.tid = tid;
    f->key.api_id = spec->api_id;
    f->key.kind = spec->fixed_kind;
    f->cls = spec->cls;
    f->entry_sp = sp;

    if (spec->cls == GPU_CLASS_LAUNCH) {
        gpu_read_launch(ctx, w, spec, &f->key);
    } else {
        if (spec->object_slot != GPU_NO_SLOT)
            f->key.object = gpu_arg(ctx, w, spec->object_slot);
        if (spec->stream_slot != GPU_NO_SLOT)
            f->key.stream = gpu_arg(ctx, w, spec->stream_slot);
    }
    if (spec->bytes_slot != GPU_NO_SLOT) {
        __u64 n = gpu_arg(ctx, w, spec->bytes_slot);
        if (spec->dtype_slot != GPU_NO_SLOT)
            n *= nccl_type_size(gpu_arg(ctx, w, spec->dtype_slot));
        if (spec->bytes_mul_slot != GPU_NO_SLOT)
            n *= gpu_arg(ctx, w, spec->bytes_mul_slot);
        f->bytes = n * (spec->bytes_scale ? spec->bytes_scale : 1);
    }
    if (spec->kind_slot != GPU_NO_SLOT) {
        __u64 kind = gpu_arg(ctx, w, spec->kind_slot);
        f->key.kind = kind <= GPU_COPY_DEFAULT ? (__u8)kind : GPU_COPY_UNKNOWN;
    }

    /* The call path: of every call (exact), or of the process's first call after each sampling interval
     * (sampled: holds the capture rate to a budget however fast the calls come); of every hand-off. */
#ifdef GPU_LAST_CALL
    f->start_ns = bpf_ktime_get_ns();  /* the entry's time, for the joins below (the clock is read where needed) */
#endif
    if (handoff || gpu_take_path(spec->proc_slot)) {
        f->key.flags |= GPU_KEY_F_SAMPLED;
        gpu_capture_path(ctx, ret, spec->proc_slot, 0, ak.pid, tid, &f->key.user_stack, &f->key.py_stack);
    }
    f = gpu_scratch.lookup(&zero);  /* what follows reads the scratch again: nothing held across the walk */
    if (!f)
        return 0;
    if (f->cls == GPU_CLASS_HANDOFF) {
        struct gpu_origin o = {};
        o.tid = tid;
        o.label = f->key.api_id;
        o.entry_sp = f->entry_sp;
        o.user_stack = f->key.user_stack;
        o.py_stack = f->key.py_stack;
        gpu_origins_in_use();
        gpu_origins.update(&ak.pid, &o);
        gpu_stat_inc(GPU_STAT_HANDOFFS);
        return 0;
    }
    if (f->key.flags & GPU_KEY_F_SAMPLED) {
        gpu_stat_inc(GPU_STAT_SAMPLED);
        if (f->key.user_stack == 0) {
            f->key.flags |= GPU_KEY_F_STACK_LOST;
            gpu_stat_inc(GPU_STAT_STACK_LOST);
        }
    }
    /* Launched for a backward node, or by a worker while another thread's hand-off call runs: charged
     * to that call path too. */
    if (gpu_apply_origin(ak.pid, tid, &f->key))
        gpu_stat_inc(f->key.origin_node ? GPU_STAT_NODE_CALLS : GPU_STAT_HANDED_OFF);
#ifdef GPU_LAST_CALL
    /* The driver call inside a runtime call the probes do not see, whose correlation id arrived just
     * before: the id's device work goes under this call, next to its count, not under a second path. */
    struct gpu_orphan *orphan = gpu_orphans.lookup(&tid);
    if (orphan) {
        if (orphan->pid == ak.pid && f->start_ns - orphan->time_ns <= GPU_JOIN_WINDOW_NS && f->cls != GPU_CLASS_SYNC &&
            f->cls != GPU_CLASS_ALLOC && f->cls != GPU_CLASS_FREE) {
            struct gpu_corr_key ck = {};
            ck.pid = ak.pid;
            ck.correlation = orphan->correlation;
            gpu_adopted.update(&ck, &f->key);
            gpu_stat_inc(GPU_STAT_ADOPTED);
        }
        gpu_orphans.delete(&tid);
    }
#endif
    /* Launches return at once; their API time is timed on the first call of each call path and every
     * time_every-th after it, the others counted here and their return left alone (uprobe sessions). */
    int entry_only = spec->flags & GPU_SPEC_F_ENTRY_ONLY;
    struct gpu_config *cfg = gpu_config.lookup(&zero);
    __u64 time_every = cfg ? cfg->api_time_every : 0;
    if (!entry_only && time_every > 1 && f->cls == GPU_CLASS_LAUNCH) {
        struct gpu_val *v = gpu_val_of(&f->key);
        if (v && (v->calls & (time_every - 1))) {  /* a path seen before: its handle and thread are known */
            gpu_add_to(v, 0, f->bytes, 0);
            gpu_stat_inc(GPU_STAT_UNTIMED);
#ifdef GPU_LAST_CALL
            gpu_last.update(&tid, (struct gpu_last_call *)f);  /* key and entry time, for a join inside it */
#endif
            return 1;
        }
    }
    /* A kernel handle's first launch, and the thread's name at its first call with a path: each a launch path's
     * first call, which is timed (untimed launches returned above) */
    if (f->cls == GPU_CLASS_LAUNCH)
        gpu_remember_object(ak.pid, f->key.object);
    __u64 comm_key = (__u64)ak.pid << 32 | tid;
    if ((f->key.flags & GPU_KEY_F_SAMPLED) && !gpu_comms.lookup(&comm_key)) {
        struct gpu_comm comm = {};
        bpf_get_current_comm(comm.comm, sizeof(comm.comm));
        gpu_comms.update(&comm_key, &comm);
    }
    if (entry_only) {
        gpu_add(&f->key, 0, f->bytes, 0);
#ifdef GPU_LAST_CALL
        gpu_last.update(&tid, (struct gpu_last_call *)f);  /* key and entry time, for a join inside it */
#endif
        return 1;
    }
    f->start_ns = bpf_ktime_get_ns();
    gpu_inflight.update(&tid, f);
    return 0;
}

static __always_inline struct gpu_api_spec *gpu_spec_at(struct pt_regs *ctx, struct gpu_addr_key *ak, __u64 id) {
    ak->pid = id >> 32;
    ak->addr = PT_REGS_IP(ctx);
    return gpu_addrs.lookup(ak);
}

int on_gpu_api_entry(struct pt_regs *ctx) {
    __u64 id = bpf_get_current_pid_tgid();
    struct gpu_addr_key ak = {};
    struct gpu_api_spec *spec = gpu_spec_at(ctx, &ak, id);
    if (spec)  /* else another process mapping the same library, or an API we do not track */
        gpu_entry(ctx, spec, ak, id);
    return 0;  /* a plain uprobe's program returns 0: anything else asks perf to record a sample */
}

/* Records handle -> name when cuModuleGetFunction & co return. */
static __always_inline int gpu_getfunc_return(struct pt_regs *ctx, __u32 tid, struct gpu_inflight *g) {
    if (PT_REGS_SP(ctx) != g->entry_sp + 8)
        return 0;
    struct gpu_fn_key fk = {};
    fk.pid = g->key.pid;
    if (g->out_ptr)
        bpf_probe_read_user(&fk.handle, sizeof(fk.handle), (void *)g->out_ptr);
    int zero = 0;
    struct gpu_fn_name *name = gpu_name_scratch.lookup(&zero);
    if (name && fk.handle && g->name_ptr) {
        if (g->cls == GPU_CLASS_GETFUNC) {
            bpf_probe_read_user_str(name->name, sizeof(name->name), (void *)g->name_ptr);
            gpu_fn_names.update(&fk, name);
            gpu_stat_inc(GPU_STAT_NAMES_LEARNED);
        } else {
            struct gpu_fn_key src = {};
            src.pid = g->key.pid;
            src.handle = g->name_ptr;
            struct gpu_fn_name *known = gpu_fn_names.lookup(&src);
            if (known) {
                gpu_fn_names.update(&fk, known);
                gpu_stat_inc(GPU_STAT_NAMES_LEARNED);
            }
        }
    }
    gpu_getfunc.delete(&tid);
    return 1;
}

/* A work item was created: its sequence number is the return value; keep the creating call path. */
static __always_inline int gpu_node_created_return(struct pt_regs *ctx, __u32 pid, __u32 tid, __u64 *entry_sp) {
    if (PT_REGS_SP(ctx) != *entry_sp + 8)
        return 0;
    gpu_node_pending.delete(&tid);
    struct gpu_node_key nk = {};
    nk.pid = pid;
    nk.seq = PT_REGS_RC(ctx);
    struct gpu_node_origin o = {};
    o.tid = tid;
    gpu_capture_path(ctx, 0, GPU_NO_CONTINUE, 0, pid, tid, &o.user_stack, &o.py_stack);  /* at return */
    gpu_node_origins.update(&nk, &o);
    gpu_stat_inc(GPU_STAT_NODES_CREATED);
    return 1;
}

static __always_inline void gpu_return(struct pt_regs *ctx, __u64 id) {
    __u32 tid = (__u32)id, pid = id >> 32;
    __u64 *pending = gpu_node_pending.lookup(&tid);
    if (pending && gpu_node_created_return(ctx, pid, tid, pending))
        return;
    struct gpu_node_run *run = gpu_node_runs.lookup(&tid);
    if (run && PT_REGS_SP(ctx) == run->entry_sp + 8) {
        gpu_node_runs.delete(&tid);  /* the work item is done */
        return;
    }
    struct gpu_origin *origin = gpu_origins.lookup(&pid);
    if (origin && origin->tid == tid && PT_REGS_SP(ctx) == origin->entry_sp + 8) {
        gpu_origins.delete(&pid);  /* the hand-off call returned: its work is done */
        return;
    }
    struct gpu_inflight *g = gpu_getfunc.lookup(&tid);
    if (g && gpu_getfunc_return(ctx, tid, g))
        return;
    struct gpu_inflight *f = gpu_inflight.lookup(&tid);
    if (!f)
        return;
    /* The return of a nested call: its stack pointer differs from the outer entry's (+8 for the
     * popped return address). */
    if (PT_REGS_SP(ctx) != f->entry_sp + 8)
        return;
    gpu_add(&f->key, bpf_ktime_get_ns() - f->start_ns, f->bytes, 1);
    gpu_inflight.delete(&tid);
}

int on_gpu_api_return(struct pt_regs *ctx) {
    gpu_return(ctx, bpf_get_current_pid_tgid());
    return 0;
}
#endif

/* Entry and return in one program, attached as an uprobe session (Linux 6.13+): an entry is at a probed
 * function's first instruction, which gpu_addrs names; a return is at an address inside the caller, which it
 * does not (bcc cannot call the bpf_session_is_return kfunc). The entry's 1 leaves the return alone. The
 * return goes on in a program of its own, by tail call: with it inline, the verifier's walk of the entry and
 * the return together passed its bound. */
BPF_PROG_ARRAY(gpu_session_return, 1);

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
int on_gpu_api_session_return(struct pt_regs *ctx) {
    gpu_return(ctx, bpf_get_current_pid_tgid());
    return 0;
}

int on_gpu_api_session(struct pt_regs *ctx) {
    __u64 id = bpf_get_current_pid_tgid();
    struct gpu_addr_key ak = {};
    struct gpu_api_spec *spec = gpu_spec_at(ctx, &ak, id);
    if (spec)
        return gpu_entry(ctx, spec, ak, id);
    gpu_session_return.call(ctx, 0);
    gpu_stat_inc(GPU_STAT_NO_RETURN);  /* only where the tail call is missing: the return went unhandled */
    return 0;
}
#endif
