/* Structs shared by cpu_sampler.bpf.c and probes/cpu_sampler.py (checked by tests/unit/test_probe_layouts.py). */
#ifndef DEEPCTX_CPU_SAMPLER_H
#define DEEPCTX_CPU_SAMPLER_H

#include <linux/types.h>

/* One aggregation bucket: CPU samples are counted per (pid, tid, native stack, Python stack). */
struct sample_key {
    __u32 pid;
    __u32 tid;
    __u64 user_stack;      /* id in native_stacks with DEEPCTX_NATIVE_UNWIND, else in `stacks` */
    __u64 py_stack;        /* id in py_stacks, 0 = no Python stack */
    __s32 kernel_stack_id; /* id in `stacks`, negative = none / not recorded */
    __u32 flags;           /* SAMPLE_F_* and the Python / unwinder flags */
};

#define SAMPLE_F_USER_STACK_LOST   (1u << 0)  /* no user stack (collision, map full, fault) */
#define SAMPLE_F_KERNEL_MODE       (1u << 1)  /* the sample interrupted the kernel */
#define SAMPLE_F_PY_SHIFT          8          /* Python walker flags live in bits 8..15 */
#define SAMPLE_F_NATIVE_SHIFT      16         /* native unwinder flags live in bits 16..23 */

/* A target's settings for this capture (the value of `targets`, keyed by pid), and its own counters: the
 * program's (cpu_stats) count every capture on it (probes/program_share.py). */
struct sampler_target {
    __u32 flags;           /* SAMPLER_T_* */
    __u32 pad;
    __u64 samples;
    __u64 user_stacks_lost;
    __u64 kernel_stacks_lost;
    __u64 dropped_map_full;
};

#define SAMPLER_T_KERNEL_STACKS    (1u << 0)  /* also record kernel stacks below system calls */

/* Per-CPU counters, read by user space and summed. */
enum cpu_sampler_stat {
    CPU_STAT_SAMPLES = 0,         /* samples of a target process */
    CPU_STAT_USER_STACK_LOST,     /* user stack not recorded */
    CPU_STAT_KERNEL_STACK_LOST,   /* kernel stack not recorded (when asked for) */
    CPU_STAT_COUNTS_FULL,         /* aggregation map full: sample dropped */
    CPU_STAT__COUNT,
};

#endif
