/* CPU sampler: on each cpu-clock perf event of a target process, record the call path and count it.
 * Settings (-D, the daemon's, the same for every capture): SAMPLER_STACK_ENTRIES, SAMPLER_COUNT_ENTRIES,
 * SAMPLER_COUNT_SPARE, SAMPLER_MAX_TARGETS. What a capture asks for is in its target's entry of `targets`
 * (struct sampler_target), so one loaded program serves every capture.
 * Uses the Python walker (python_stack.bpf.h) and the native unwinder (native_unwind.bpf.h) when the
 * session includes them before this file (DEEPCTX_PYTHON, DEEPCTX_NATIVE_UNWIND). */
#include <uapi/linux/ptrace.h>
#include "cpu_sampler.h"
#include "counts_map.bpf.h"

/* struct bpf_perf_event_data (uapi, ABI-stable), declared here because including
 * <uapi/linux/bpf_perf_event.h> adds two seconds to every bcc compilation. */
#if defined(__TARGET_ARCH_arm64)
struct deepctx_perf_event_data { struct user_pt_regs regs; __u64 sample_period; __u64 addr; };
#else
struct deepctx_perf_event_data { struct pt_regs regs; __u64 sample_period; __u64 addr; };
#endif

BPF_HASH(targets, __u32, struct sampler_target, SAMPLER_MAX_TARGETS);
BPF_STACK_TRACE(stacks, SAMPLER_STACK_ENTRIES);
COUNTS_MAP(counts, struct sample_key, __u64, SAMPLER_COUNT_ENTRIES, SAMPLER_COUNT_SPARE, 0);
/* preallocated: perf_event programs may use no other hash map before Linux 6.1 */
BPF_PERCPU_ARRAY(cpu_stats, __u64, CPU_STAT__COUNT);
/* the sample's kernel stack id, kept in map memory until the key is counted: the verifier does not track
 * what a map holds, so the paths with and without a kernel stack are one state again before the walks
 * (held in a register or on the stack, the setting's branch doubled the load's time) */
BPF_PERCPU_ARRAY(cpu_kstack, __s32, 1);

#ifndef DEEPCTX_DECLS_ONLY /* code: a cached program compiles its maps only (probes/program_cache.py) */
static __always_inline void cpu_stat_inc(int idx) {
    __u64 *v = cpu_stats.lookup(&idx);
    if (v)
        (*v)++;
}

/* A loss, in the program's counters and the target's own (looked up again: losses are rare, and a pointer
 * kept across the walks would cost the verifier states). */
static __always_inline void cpu_target_loss(__u32 pid, int idx) {
    cpu_stat_inc(idx);
    struct sampler_target *t = targets.lookup(&pid);
    if (!t)
        return;
    if (idx == CPU_STAT_USER_STACK_LOST)
        __sync_fetch_and_add(&t->user_stacks_lost, 1);
    else if (idx == CPU_STAT_KERNEL_STACK_LOST)
        __sync_fetch_and_add(&t->kernel_stacks_lost, 1);
    else if (idx == CPU_STAT_COUNTS_FULL)
        __sync_fetch_and_add(&t->dropped_map_full, 1);
}

int on_cpu_sample(struct deepctx_perf_event_data *ctx) {
    __u64 id = bpf_get_current_pid_tgid();
    __u32 pid = id >> 32;
    struct sampler_target *t = targets.lookup(&pid);
    if (!t)
        return 0;
    cpu_stat_inc(CPU_STAT_SAMPLES);
    __sync_fetch_and_add(&t->samples, 1);
    int zero_idx = 0;
    __s32 *kid = cpu_kstack.lookup(&zero_idx);
    if (!kid)
        return 0;
    *kid = -1;
    if ((t->flags & SAMPLER_T_KERNEL_STACKS) && (__s64)PT_REGS_IP(&ctx->regs) < 0) {
        *kid = stacks.get_stackid(ctx, 0);
        if (*kid < 0)
            cpu_target_loss(pid, CPU_STAT_KERNEL_STACK_LOST);
    }

    struct sample_key key = {};
    key.pid = pid;
    key.tid = (__u32)id;
    key.kernel_stack_id = -1;
    /* Kernel addresses have the top bit set on x86-64 and arm64. */
    if ((__s64)PT_REGS_IP(&ctx->regs) < 0)
        key.flags |= SAMPLE_F_KERNEL_MODE;

#ifdef DEEPCTX_NATIVE_UNWIND
    __u32 nflags = 0;
    key.user_stack = native_stack_capture((struct pt_regs *)&ctx->regs, pid, &nflags, WALK_SLOT_IRQ);
    key.flags |= (nflags & 0xff) << SAMPLE_F_NATIVE_SHIFT;
    if (key.user_stack == 0) {
        key.flags |= SAMPLE_F_USER_STACK_LOST;
        cpu_target_loss(pid, CPU_STAT_USER_STACK_LOST);
    }
#else
    int ustack = stacks.get_stackid(ctx, BPF_F_USER_STACK);
    if (ustack < 0) {
        key.flags |= SAMPLE_F_USER_STACK_LOST;
        cpu_target_loss(pid, CPU_STAT_USER_STACK_LOST);
    } else {
        key.user_stack = (__u64)ustack;
    }
#endif

#ifdef DEEPCTX_PYTHON
    __u32 pyflags = 0;
    key.py_stack = python_stack_capture(pid, key.tid, &pyflags, 0, WALK_SLOT_IRQ);
    key.flags |= (pyflags & 0xff) << SAMPLE_F_PY_SHIFT;
#endif

    kid = cpu_kstack.lookup(&zero_idx);
    if (kid)
        key.kernel_stack_id = *kid;

    __u64 zero = 0;
    int slot = 0;
    __u64 *count = counts_get(counts.lookup(&slot), &key, &zero);
    if (!count) {
        cpu_target_loss(pid, CPU_STAT_COUNTS_FULL);
        return 0;
    }
    __sync_fetch_and_add(count, 1);
    return 0;
}
#endif
